package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tokend/tokend/client"
)

const webhooksUsage = `usage: tokenctl webhooks <subcommand> [--url URL] [--key KEY] [--json]
  webhooks create <endpoint-url> [--types issued,spend,...] [--idempotency-key KEY]
                                                             register an endpoint; prints its secret, once
  webhooks list                                              the tenant's endpoints
  webhooks stats                                             what the tenant's endpoints are owed, their delivery lag, which fail
  webhooks get <id>                                          an endpoint, its latest deliveries and their attempts
  webhooks enable <id> | disable <id> | delete <id>           disabling parks its deliveries; enabling resumes them
  webhooks rotate-secret <id> [--overlap 24h] [--idempotency-key KEY]
                                                             a new secret, printed once; the old one signs beside it for the overlap
  (create and rotate-secret send an Idempotency-Key, one per run unless --idempotency-key names one:
   a retry gets the first answer, never a second endpoint or rotation)
  webhooks redeliver <id> [--after POSITION] [--position POSITION] [--all] [--delivered]
                                                             send failed deliveries now; --all also hurries pending and parked
                                                             ones; --delivered also sends those already delivered
`

func webhooksCmd(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, webhooksUsage)
		return usagef("webhooks: want create, list, stats, get, enable, disable, delete, rotate-secret or redeliver")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "create":
		c := e.newCommand("webhooks create", "webhooks create <endpoint-url> [--types a,b]", "endpoint-url")
		types := c.fs.String("types", "", "comma-separated event types to deliver; all when empty")
		key := c.fs.String("idempotency-key", "", "the Idempotency-Key to send: running again with the same key answers the same endpoint and secret; one is made up when empty")
		ops, err := c.parse(rest)
		if err != nil {
			return err
		}
		r := client.WebhookRequest{URL: ops[0], IdempotencyKey: *key}
		if *types != "" {
			r.EventTypes = strings.Split(*types, ",")
		}
		return webhookCall(c, func(api *client.Client) (*client.Webhook, error) { return api.CreateWebhook(ctx, r) })
	case "list":
		c := e.newCommand("webhooks list", "webhooks list")
		if _, err := c.parse(rest); err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		l, err := api.Webhooks(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(l.Body)
		}
		t := newTable(c.stdout)
		t.row("ID", "URL", "TYPES", "ENABLED", "FEED_POSITION")
		for _, w := range l.Items {
			t.row(w.ID, w.URL, strings.Join(w.EventTypes, ","), w.Enabled, w.FeedPosition)
		}
		return t.Flush()
	case "stats":
		c := e.newCommand("webhooks stats", "webhooks stats")
		if _, err := c.parse(rest); err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		s, err := api.WebhookStats(ctx)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(s.Body)
		}
		t := newTable(c.stdout)
		t.row("ID", "ENABLED", "FAILING_SINCE", "PENDING", "PARKED", "OLDEST_PENDING_AGE", "DELIVERED", "LAG_P50", "LAG_P99")
		for _, w := range s.Endpoints {
			failing := ""
			if w.FailingSince != nil {
				failing = w.FailingSince.UTC().Format(time.RFC3339)
			}
			t.row(w.ID, w.Enabled, failing, w.Pending, w.Parked, seconds(w.OldestPendingAgeSeconds), w.Delivered,
				seconds(w.LagP50Seconds), seconds(w.LagP99Seconds))
		}
		t.row("all", "", fmt.Sprintf("%d failing", s.FailingEndpoints), s.Pending, s.Parked, seconds(s.OldestPendingAgeSeconds), s.Delivered,
			"", seconds(s.LagP99Seconds))
		return t.Flush()
	case "get", "enable", "disable", "delete":
		c := e.newCommand("webhooks "+sub, "webhooks "+sub+" <id>", "id")
		ops, err := c.parse(rest)
		if err != nil {
			return err
		}
		call := map[string]func(*client.Client, context.Context, string) (*client.Webhook, error){
			"get": (*client.Client).Webhook, "enable": (*client.Client).EnableWebhook,
			"disable": (*client.Client).DisableWebhook, "delete": (*client.Client).DeleteWebhook,
		}[sub]
		return webhookCall(c, func(api *client.Client) (*client.Webhook, error) { return call(api, ctx, ops[0]) })
	case "rotate-secret":
		c := e.newCommand("webhooks rotate-secret", "webhooks rotate-secret <id> [--overlap 24h]", "id")
		overlap := c.fs.Duration("overlap", 0, "how long the old secret keeps signing beside the new one; 0: the server's default")
		key := c.fs.String("idempotency-key", "", "the Idempotency-Key to send: running again with the same key answers the same secret, without rotating again; one is made up when empty")
		ops, err := c.parse(rest)
		if err != nil {
			return err
		}
		if *overlap < 0 || *overlap%time.Second != 0 {
			return usagef("webhooks rotate-secret: --overlap %s: want whole seconds, e.g. 24h", *overlap)
		}
		r := client.SecretRotation{OverlapSeconds: int64(*overlap / time.Second), IdempotencyKey: *key}
		return webhookCall(c, func(api *client.Client) (*client.Webhook, error) { return api.RotateWebhookSecret(ctx, ops[0], r) })
	case "redeliver":
		c := e.newCommand("webhooks redeliver", "webhooks redeliver <id> [--after POSITION] [--position POSITION] [--all] [--delivered]", "id")
		var r client.Redelivery
		c.fs.Int64Var(&r.After, "after", 0, "only deliveries of events after this feed position")
		c.fs.Int64Var(&r.Position, "position", 0, "only the delivery of this feed position")
		c.fs.BoolVar(&r.All, "all", false, "also hurry the pending deliveries and the parked ones (never the delivered ones)")
		c.fs.BoolVar(&r.Delivered, "delivered", false, "also the deliveries already made")
		ops, err := c.parse(rest)
		if err != nil {
			return err
		}
		api, err := c.client()
		if err != nil {
			return err
		}
		n, err := api.RedeliverWebhook(ctx, ops[0], r)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(n.Body)
		}
		_, err = fmt.Fprintf(c.stdout, "redelivered %d\n", n.Redelivered)
		return err
	}
	fmt.Fprint(e.stderr, webhooksUsage)
	return usagef("webhooks %s: want create, list, get, enable, disable, delete, rotate-secret or redeliver", sub)
}

// webhookCall runs call and prints the endpoint it answers.
func webhookCall(c *command, call func(*client.Client) (*client.Webhook, error)) error {
	api, err := c.client()
	if err != nil {
		return err
	}
	w, err := call(api)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(w.Body)
	}
	t := newTable(c.stdout)
	t.row("id", w.ID)
	t.row("url", w.URL)
	t.row("event_types", strings.Join(w.EventTypes, ","))
	t.row("enabled", w.Enabled)
	if w.DisabledReason != nil {
		t.row("disabled_reason", *w.DisabledReason)
	}
	t.row("feed_position", w.FeedPosition)
	if w.FailingSince != nil {
		t.row("failing_since", w.FailingSince.UTC().Format(time.RFC3339))
	}
	if w.PreviousSecretExpiresAt != nil {
		t.row("previous_secret_until", w.PreviousSecretExpiresAt.UTC().Format(time.RFC3339)+"   (the old secret signs beside the new one until then)")
	}
	if w.Secret != "" {
		t.row("secret", w.Secret+"   (shown once: keep it to verify deliveries)")
	}
	for _, d := range w.Deliveries {
		line := fmt.Sprintf("%d %s %s, %d attempts", d.Position, d.EventID, d.State, d.Attempts)
		if d.State == "pending" {
			line += ", next " + d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		t.row("delivery", line)
		var tries []struct {
			Attempt    int       `json:"attempt"`
			At         time.Time `json:"at"`
			Status     *int      `json:"status"`
			Error      *string   `json:"error"`
			DurationMS int       `json:"duration_ms"`
		}
		_ = json.Unmarshal(d.Tries, &tries) // shown as far as it reads
		for _, a := range tries {
			// One sentence: the error alone when no answer came (it says
			// so); else the status and what the error adds to it, without
			// the "answered 503" older attempts repeated in it.
			said := ""
			if a.Error != nil {
				said = *a.Error
			}
			answer := cmp.Or(said, "no answer")
			if a.Status != nil {
				answer = fmt.Sprintf("answered %d", *a.Status)
				if said = strings.TrimPrefix(strings.TrimPrefix(said, answer), ", "); said != "" {
					answer += ": " + said
				}
			}
			t.row("  attempt", fmt.Sprintf("%d %s %s, %d ms", a.Attempt, a.At.UTC().Format(time.RFC3339), answer, a.DurationMS))
		}
	}
	return t.Flush()
}

// seconds renders a figure in seconds as a duration to the millisecond.
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
