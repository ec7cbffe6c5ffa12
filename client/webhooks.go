package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"time"
)

// Webhook is a registered webhook endpoint.
type Webhook struct {
	Meta           `json:"-"`
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	EventTypes     []string   `json:"event_types"` // empty: all
	Enabled        bool       `json:"enabled"`
	DisabledReason *string    `json:"disabled_reason"`
	FeedPosition   int64      `json:"feed_position"`
	FailingSince   *time.Time `json:"failing_since"`
	CreatedAt      time.Time  `json:"created_at"`
	// PreviousSecretExpiresAt, after RotateWebhookSecret, is when the
	// secret it replaced stops signing beside the new one; nil otherwise.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	// Secret, the whsec_ signing secret, is set in the answers of
	// CreateWebhook and RotateWebhookSecret only: tokend never shows it
	// again.
	Secret string `json:"secret,omitempty"`
	// Deliveries, in Webhook's answer only, are the latest deliveries.
	Deliveries []WebhookDelivery `json:"deliveries,omitzero"`
}

// WebhookDelivery is one event owed to an endpoint, with its attempts.
type WebhookDelivery struct {
	Position      int64           `json:"position"`
	EventID       string          `json:"event_id"`
	State         string          `json:"state"` // pending, delivered, failed, or parked while the endpoint is disabled
	Attempts      int             `json:"attempts"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	CreatedAt     time.Time       `json:"created_at"`
	FinishedAt    *time.Time      `json:"finished_at"`
	Tries         json.RawMessage `json:"tries"`
}

// WebhookRequest registers an endpoint.
type WebhookRequest struct {
	URL        string   `json:"url"`
	EventTypes []string `json:"event_types,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header, the same on
	// every retry of the call, so that a retry after a lost answer gets the
	// endpoint (and secret) the first attempt registered instead of a
	// second endpoint. Empty: the client makes one up for the call. Set
	// one of your own to make a call repeated later (a restarted script)
	// register once too.
	IdempotencyKey string `json:"-"`
}

// CreateWebhook registers an endpoint; keep the answer's Secret to verify
// deliveries with (package webhook). Meta.Replayed says the answer is one
// given before under the same IdempotencyKey.
func (c *Client) CreateWebhook(ctx context.Context, r WebhookRequest) (*Webhook, error) {
	return c.webhookOnce(ctx, "/v1/admin/webhooks", r.IdempotencyKey, r)
}

// webhookOnce posts body under the Idempotency-Key key, or one made up for
// this call, kept across its retries.
func (c *Client) webhookOnce(ctx context.Context, path, key string, body any) (*Webhook, error) {
	if key == "" {
		key = "tokend-go-" + rand.Text()
	}
	cl, err := newCall(http.MethodPost, path, body)
	if err != nil {
		return nil, err
	}
	cl.header.Set("Idempotency-Key", key)
	a, err := c.do(ctx, cl, ok)
	if err != nil {
		return nil, err
	}
	var out Webhook
	if err := decode(cl, a, &out); err != nil {
		return nil, err
	}
	out.Meta = a.meta()
	return &out, nil
}

// Webhook reads an endpoint with its latest deliveries.
func (c *Client) Webhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhook(ctx, http.MethodGet, "/v1/admin/webhooks/"+esc(id), nil)
}

// EnableWebhook enables an endpoint, clearing its failure run.
func (c *Client) EnableWebhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhook(ctx, http.MethodPost, "/v1/admin/webhooks/"+esc(id)+"/enable", nil)
}

// DisableWebhook stops deliveries to an endpoint; they wait.
func (c *Client) DisableWebhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhook(ctx, http.MethodPost, "/v1/admin/webhooks/"+esc(id)+"/disable", nil)
}

// DeleteWebhook removes an endpoint with its deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhook(ctx, http.MethodDelete, "/v1/admin/webhooks/"+esc(id), nil)
}

func (c *Client) webhook(ctx context.Context, method, path string, body any) (*Webhook, error) {
	var out Webhook
	m, err := c.send(ctx, method, path, nil, body, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// WebhookList is the tenant's endpoints.
type WebhookList struct {
	Meta  `json:"-"`
	Items []Webhook `json:"items"`
}

// Webhooks lists the tenant's endpoints, oldest first.
func (c *Client) Webhooks(ctx context.Context) (*WebhookList, error) {
	var out WebhookList
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/webhooks", nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Redelivery selects deliveries to send now: the failed ones; with All
// also the pending and parked ones (hurried: due now); with Delivered also
// those already delivered.
type Redelivery struct {
	After     int64 `json:"after,omitempty"`     // only events after this feed position
	Position  int64 `json:"position,omitempty"`  // only the delivery of this feed position
	All       bool  `json:"all,omitempty"`       // also the pending and parked ones
	Delivered bool  `json:"delivered,omitempty"` // also those already delivered
}

// Redelivered is how many deliveries will be sent again.
type Redelivered struct {
	Meta        `json:"-"`
	Redelivered int64 `json:"redelivered"`
}

// RedeliverWebhook sends an endpoint's deliveries selected by r now.
func (c *Client) RedeliverWebhook(ctx context.Context, id string, r Redelivery) (*Redelivered, error) {
	var out Redelivered
	m, err := c.send(ctx, http.MethodPost, "/v1/admin/webhooks/"+esc(id)+"/redeliver", nil, r, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// SecretRotation asks for an endpoint's new secret.
type SecretRotation struct {
	// OverlapSeconds is how long the old secret keeps signing beside the
	// new one; 0: the server's TOKEND_WEBHOOK_SECRET_OVERLAP (24 h unless
	// set). At most a week.
	OverlapSeconds int64 `json:"overlap_seconds,omitempty"`
	// IdempotencyKey is sent as the Idempotency-Key header, as in
	// WebhookRequest: a retry gets the first rotation's secret, and does
	// not rotate again (which would stop the secret receivers were just
	// given from signing).
	IdempotencyKey string `json:"-"`
}

// RotateWebhookSecret gives an endpoint a new secret, in the answer's
// Secret, shown this once (and to retries under the same IdempotencyKey);
// deliveries carry signatures under both until PreviousSecretExpiresAt.
func (c *Client) RotateWebhookSecret(ctx context.Context, id string, r SecretRotation) (*Webhook, error) {
	return c.webhookOnce(ctx, "/v1/admin/webhooks/"+esc(id)+"/rotate-secret", r.IdempotencyKey, r)
}

// WebhookStats is what the tenant's webhooks are owed and how late they
// are, for the tenant's operators only: the unauthenticated /metrics
// names no tenant.
type WebhookStats struct {
	Meta `json:"-"`
	// Pending deliveries are owed and tried; Parked ones wait for their
	// endpoint to be enabled (they are not lag).
	Pending int64 `json:"pending"`
	Parked  int64 `json:"parked"`
	// OldestPendingAgeSeconds is how long the oldest pending delivery has
	// been owed; 0 when none is.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// WindowSeconds is the window the lag figures are over: the latest
	// deliveries made in it (at most 200 an endpoint).
	WindowSeconds float64 `json:"window_seconds"`
	// Delivered is how many deliveries the lag figures are over;
	// LagP99Seconds the worst endpoint's p99, from an event's commit to its
	// endpoint's 2xx answer.
	Delivered         int64   `json:"delivered"`
	LagP99Seconds     float64 `json:"lag_p99_seconds"`
	FailingEndpoints  int     `json:"failing_endpoints"`
	DisabledEndpoints int     `json:"disabled_endpoints"`
	// Endpoints are the same figures per endpoint, oldest endpoint first.
	Endpoints []WebhookEndpointStats `json:"endpoints"`
}

// WebhookEndpointStats is one endpoint's part of WebhookStats.
type WebhookEndpointStats struct {
	ID                      string     `json:"id"`
	URL                     string     `json:"url"`
	Enabled                 bool       `json:"enabled"`
	FailingSince            *time.Time `json:"failing_since"` // set while its attempts fail
	Pending                 int64      `json:"pending"`
	Parked                  int64      `json:"parked"`
	OldestPendingAgeSeconds float64    `json:"oldest_pending_age_seconds"`
	Delivered               int64      `json:"delivered"`
	LagP50Seconds           float64    `json:"lag_p50_seconds"`
	LagP99Seconds           float64    `json:"lag_p99_seconds"`
}

// WebhookStats answers the tenant's webhook backlog, lag and failing
// endpoints.
func (c *Client) WebhookStats(ctx context.Context) (*WebhookStats, error) {
	var out WebhookStats
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/webhook-stats", nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}
