package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

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

// StatsWindow is the window of the lag figures Stats answers.
const StatsWindow = 5 * time.Minute

// Stats answers tenant's webhook figures: what its endpoints are owed, how
// late its latest deliveries were, and which endpoints fail. Only the
// tenant's operators read them (GET /v1/admin/webhook-stats).
func Stats(ctx context.Context, pool *pgxpool.Pool, tenant string) (client.WebhookStats, error) {
	if err := token.CheckText("tenant", tenant); err != nil {
		return client.WebhookStats{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	rows, err := store.WebhookStats(ctx, pool, tenant, StatsWindow)
	if err != nil {
		return client.WebhookStats{}, err
	}
	s := client.WebhookStats{WindowSeconds: StatsWindow.Seconds(), Endpoints: make([]client.WebhookEndpointStats, len(rows))}
	for i, r := range rows {
		s.Endpoints[i] = client.WebhookEndpointStats{ID: r.ID, URL: r.URL, Enabled: r.Enabled, FailingSince: r.FailingSince,
			Pending: r.Pending, Parked: r.Parked, OldestPendingAgeSeconds: r.OldestPendingAgeSeconds,
			Delivered: r.Delivered, LagP50Seconds: r.LagP50Seconds, LagP99Seconds: r.LagP99Seconds}
		s.Pending += r.Pending
		s.Parked += r.Parked
		s.Delivered += r.Delivered
		s.OldestPendingAgeSeconds = max(s.OldestPendingAgeSeconds, r.OldestPendingAgeSeconds)
		s.LagP99Seconds = max(s.LagP99Seconds, r.LagP99Seconds)
		if r.FailingSince != nil {
			s.FailingEndpoints++
		}
		if !r.Enabled {
			s.DisabledEndpoints++
		}
	}
	return s, nil
}
