package dispatch

import "github.com/tokend/tokend/client"

// view is an endpoint as the API shows it; the secret only on creation.
func view(e Endpoint) client.Webhook {
	v := client.Webhook{ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Enabled: e.Enabled,
		FeedPosition: e.FeedPosition, CreatedAt: e.CreatedAt, FailingSince: e.FailingSince,
		PreviousSecretExpiresAt: e.PreviousSecretUntil}
	if v.EventTypes == nil {
		v.EventTypes = []string{}
	}
	if e.DisabledReason != "" {
		v.DisabledReason = &e.DisabledReason
	}
	return v
}

// View is an endpoint as the API shows it, without its secret.
func View(e Endpoint) client.Webhook { return view(e) }
