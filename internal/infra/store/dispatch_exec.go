package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

// ErrEndpointLimit: the tenant has as many endpoints as it may register.
var ErrEndpointLimit = errors.New("store: endpoint limit reached")

// EndpointRow is a webhook endpoint as webhook_endpoints holds it (its
// columns as endpointColumns reads them): never its secret, only the nonce
// and key it derives from.
type EndpointRow struct {
	Tenant, ID, URL     string
	EventTypes          []string
	Nonce               []byte
	KeyID               string
	Enabled             bool
	DisabledReason      string
	FeedPosition        int64
	FailingSince        *time.Time
	CreatedAt           time.Time
	PreviousSecretUntil *time.Time
}

func scanEndpoint(r pgx.Row) (EndpointRow, error) {
	var e EndpointRow
	err := r.Scan(&e.Tenant, &e.ID, &e.URL, &e.EventTypes, &e.Nonce, &e.KeyID, &e.Enabled,
		&e.DisabledReason, &e.FeedPosition, &e.FailingSince, &e.CreatedAt, &e.PreviousSecretUntil)
	return e, err
}

// oneEndpoint is a statement's one endpoint; ok is false when it found none.
func oneEndpoint(row pgx.Row) (e EndpointRow, ok bool, err error) {
	e, err = scanEndpoint(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return EndpointRow{}, false, nil
	case err != nil:
		return EndpointRow{}, false, fmt.Errorf("dispatch: %w", err)
	}
	return e, true, nil
}

// NewEndpoint is an endpoint to register (endpointCreateSQL): Max is how
// many its tenant may have.
type NewEndpoint struct {
	Tenant, ID, URL string
	EventTypes      []string
	Nonce           []byte
	KeyID           string
	Max             int
}

// CreateEndpoint registers p in tx, serialized with the tenant's other
// registrations (endpointLockTenantSQL), or answers ErrEndpointLimit.
func CreateEndpoint(ctx context.Context, tx pgx.Tx, p NewEndpoint) (EndpointRow, error) {
	if _, err := tx.Exec(ctx, endpointLockTenantSQL, p.Tenant); err != nil {
		return EndpointRow{}, err
	}
	e, ok, err := oneEndpoint(tx.QueryRow(ctx, endpointCreateSQL, p.Tenant, p.ID, p.URL, p.EventTypes, p.Nonce, p.KeyID, p.Max))
	switch {
	case err != nil:
		return EndpointRow{}, err
	case !ok:
		return EndpointRow{}, ErrEndpointLimit
	}
	return e, nil
}

// RotateEndpoint gives tenant's endpoint id the secret of nonce under
// keyID, the one it replaces signing beside it for overlapSeconds
// (endpointRotateSQL); ok is false when there is no such endpoint.
func RotateEndpoint(ctx context.Context, q db.DBTX, tenant, id string, nonce []byte, keyID string, overlapSeconds float64) (EndpointRow, bool, error) {
	return oneEndpoint(q.QueryRow(ctx, endpointRotateSQL, tenant, id, nonce, keyID, overlapSeconds))
}

// ListEndpoints reads tenant's endpoints, oldest first (endpointListSQL).
func ListEndpoints(ctx context.Context, q db.DBTX, tenant string) ([]EndpointRow, error) {
	rows, err := q.Query(ctx, endpointListSQL, tenant)
	if err != nil {
		return nil, fmt.Errorf("dispatch: list: %w", err)
	}
	eps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EndpointRow, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("dispatch: list: %w", err)
	}
	return eps, nil
}

// GetEndpoint reads tenant's endpoint id (endpointGetSQL); ok is false when
// there is none.
func GetEndpoint(ctx context.Context, q db.DBTX, tenant, id string) (EndpointRow, bool, error) {
	return oneEndpoint(q.QueryRow(ctx, endpointGetSQL, tenant, id))
}

// SetEndpointEnabled enables or disables tenant's endpoint id, reason
// saying why when disabled (endpointSetEnabledSQL); ok is false when there
// is no such endpoint. Disabling writes the endpoint's row only. Enabling
// first resumes what the previous release left parked
// (endpointResumeParkedSQL) and, when the endpoint is disabled, makes due
// now its deliveries waiting out a backoff (endpointHurrySQL), each in
// statements of at most ResumeBatch rows; a backlog never tried is not
// written. Run on a pool, each statement is a transaction of its own.
func SetEndpointEnabled(ctx context.Context, q db.DBTX, tenant, id string, enabled bool, reason string) (EndpointRow, bool, error) {
	if enabled {
		e, ok, err := GetEndpoint(ctx, q, tenant, id)
		if err != nil || !ok {
			return e, ok, err
		}
		if err := resumeDeliveries(ctx, q, tenant, id, !e.Enabled); err != nil {
			return EndpointRow{}, false, err
		}
	}
	return oneEndpoint(q.QueryRow(ctx, endpointSetEnabledSQL, tenant, id, enabled, reason))
}

// resumeDeliveries resumes the endpoint's deliveries left parked by the
// previous release and, with hurry, makes due now those waiting out a
// backoff, ResumeBatch at a time.
func resumeDeliveries(ctx context.Context, q db.DBTX, tenant, id string, hurry bool) error {
	for after, more := int64(-1), true; more; {
		var found, resumed int64
		if err := q.QueryRow(ctx, endpointResumeParkedSQL, tenant, id, after, ResumeBatch).Scan(&found, &after, &resumed); err != nil {
			return fmt.Errorf("dispatch: resume: %w", err)
		}
		more = found == ResumeBatch
	}
	for after := int64(-1); hurry; {
		var found, hurried int64
		if err := q.QueryRow(ctx, endpointHurrySQL, tenant, id, after, ResumeBatch).Scan(&found, &after, &hurried); err != nil {
			return fmt.Errorf("dispatch: resume: %w", err)
		}
		hurry = found == ResumeBatch
	}
	return nil
}

// DeleteEndpoint deletes tenant's endpoint id (endpointDeleteSQL) and
// returns it; ok is false when there is none.
func DeleteEndpoint(ctx context.Context, q db.DBTX, tenant, id string) (EndpointRow, bool, error) {
	return oneEndpoint(q.QueryRow(ctx, endpointDeleteSQL, tenant, id))
}

// RedeliverParams select an endpoint's deliveries to send now
// (redeliverSQL).
type RedeliverParams struct {
	Tenant, ID string
	After      int64  // only those of events after this position
	Position   *int64 // only this one
	Hurry      bool   // also the pending and parked ones
	Delivered  bool   // also the delivered ones
}

// Redeliver sends the deliveries p selects now and answers how many
// (redeliverSQL).
func Redeliver(ctx context.Context, q db.DBTX, p RedeliverParams) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, redeliverSQL, p.Tenant, p.ID, p.After, p.Hurry, p.Position, p.Delivered).Scan(&n); err != nil {
		return 0, fmt.Errorf("dispatch: redeliver: %w", err)
	}
	return n, nil
}

// DeliveryRow is one delivery with its attempts (recentDeliveriesSQL),
// the fields of client.WebhookDelivery.
type DeliveryRow struct {
	Position      int64
	EventID       string
	State         string
	Attempts      int
	NextAttemptAt time.Time
	CreatedAt     time.Time
	FinishedAt    *time.Time
	Tries         json.RawMessage
}

// RecentDeliveries reads the latest limit deliveries of tenant's endpoint
// id, newest first (recentDeliveriesSQL).
func RecentDeliveries(ctx context.Context, q db.DBTX, tenant, id string, limit int) ([]DeliveryRow, error) {
	rows, err := q.Query(ctx, recentDeliveriesSQL, tenant, id, limit)
	if err != nil {
		return nil, fmt.Errorf("dispatch: deliveries: %w", err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryRow, error) {
		var d DeliveryRow
		err := r.Scan(&d.Position, &d.EventID, &d.State, &d.Attempts, &d.NextAttemptAt, &d.CreatedAt, &d.FinishedAt, &d.Tries)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("dispatch: deliveries: %w", err)
	}
	return ds, nil
}

// WebhookTenants reads the tenants with an enabled endpoint
// (webhookTenantsSQL).
func WebhookTenants(ctx context.Context, q db.DBTX) ([]string, error) {
	rows, err := q.Query(ctx, webhookTenantsSQL)
	if err != nil {
		return nil, fmt.Errorf("webhooks: tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("webhooks: tenants: %w", err)
	}
	return tenants, nil
}

// EndpointKey names an endpoint.
type EndpointKey struct{ Tenant, ID string }

// Behind reads the enabled endpoints behind their tenant's feed head
// (behindSQL).
func Behind(ctx context.Context, q db.DBTX) ([]EndpointKey, error) {
	rows, err := q.Query(ctx, behindSQL)
	if err != nil {
		return nil, fmt.Errorf("webhooks: fan out: %w", err)
	}
	behind, err := pgx.CollectRows(rows, pgx.RowToStructByPos[EndpointKey])
	if err != nil {
		return nil, fmt.Errorf("webhooks: fan out: %w", err)
	}
	return behind, nil
}

// FanOut offers an endpoint up to FanOutBatch events after its feed
// position (fanOutSQL): seen is how many it read, offered how many became
// deliveries.
func FanOut(ctx context.Context, q db.DBTX, ep EndpointKey) (seen, offered int64, err error) {
	if err := q.QueryRow(ctx, fanOutSQL, ep.Tenant, ep.ID).Scan(&seen, &offered); err != nil {
		return 0, 0, fmt.Errorf("webhooks: fan out: %w", err)
	}
	return seen, offered, nil
}

// ClaimLock takes, for the rest of tx, the claim lock shared with every
// instance of this release (claimLockSQL) and tenant's own claim lock if no
// other instance holds it (claimTenantLockSQL), then bounds tx's row-lock
// waits (claimLockTimeoutSQL). got is false when another instance is
// claiming tenant's deliveries: tx should claim nothing.
func ClaimLock(ctx context.Context, tx pgx.Tx, tenant string) (got bool, err error) {
	if _, err := tx.Exec(ctx, claimLockSQL); err != nil {
		return false, err
	}
	if err := tx.QueryRow(ctx, claimTenantLockSQL, tenant).Scan(&got); err != nil || !got {
		return false, err
	}
	_, err = tx.Exec(ctx, claimLockTimeoutSQL)
	return err == nil, err
}

// DueTenant is a tenant with deliveries due, and how many it has in flight
// on every instance together.
type DueTenant struct {
	Tenant   string
	InFlight int
}

// DueTenants reads the tenants with deliveries due, by name, with what
// each has in flight (dueTenantsSQL).
func DueTenants(ctx context.Context, q db.DBTX) ([]DueTenant, error) {
	rows, err := q.Query(ctx, dueTenantsSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[DueTenant])
}

// ClaimParams bound a claim (claimPickSQL, claimLeaseSQL): how many, for
// how long, what an endpoint and a tenant may have in flight, and how many
// of the claim may go to failing endpoints.
type ClaimParams struct {
	Tenant              string
	Limit               int
	LeaseSeconds        float64
	EndpointConcurrency int
	TenantConcurrency   int
	SuspectLimit        int
}

// WebhookEventRow is the event a claimed delivery carries, the fields of
// webhook.Event.
type WebhookEventRow struct {
	ID            string
	Position      int64
	Type          string
	TokenID       string
	Operation     string
	Subject       string
	Actor         string
	From          *string
	To            string
	Generation    int64
	OutcomeStatus *int
	Outcome       json.RawMessage
	At            time.Time
}

// ClaimedRow is a delivery a claim leased, with what sending it needs.
type ClaimedRow struct {
	Tenant, Endpoint, URL string
	Pos                   int64
	Attempt               int
	Nonce                 []byte
	KeyID                 string
	PrevNonce             []byte  // the rotated-out secret, during its overlap
	PrevKeyID             *string // likewise
	Suspect               bool    // the endpoint's last attempt failed
	Event                 WebhookEventRow
}

// Claim leases due deliveries of p.Tenant's enabled endpoints, in tx after
// ClaimLock, within a savepoint: it picks them (claimPickSQL), then
// leases each it picked by its key (claimLeaseSQL), in one round trip. When
// a row lock is not had in time (LockNotAvailable), it answers nothing
// claimed and tx goes on.
func Claim(ctx context.Context, tx pgx.Tx, p ClaimParams) ([]ClaimedRow, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	got, err := claim(ctx, sp, p)
	if LockNotAvailable(err) {
		return nil, sp.Rollback(ctx)
	}
	if err != nil {
		return nil, err
	}
	return got, sp.Commit(ctx)
}

func claim(ctx context.Context, tx pgx.Tx, p ClaimParams) ([]ClaimedRow, error) {
	rows, err := tx.Query(ctx, claimPickSQL, p.Limit, p.EndpointConcurrency, p.TenantConcurrency, p.Tenant, p.SuspectLimit)
	if err != nil {
		return nil, err
	}
	type key struct {
		Endpoint string
		Pos      int64
	}
	picked, err := pgx.CollectRows(rows, pgx.RowToStructByPos[key])
	if err != nil || len(picked) == 0 {
		return nil, err
	}
	b := &pgx.Batch{}
	for _, k := range picked {
		b.Queue(claimLeaseSQL, p.Tenant, p.LeaseSeconds, k.Endpoint, k.Pos)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	var out []ClaimedRow
	for range picked {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedRow, error) {
			var c ClaimedRow
			e := &c.Event
			err := r.Scan(&c.Tenant, &c.Endpoint, &c.Pos, &c.Attempt, &c.URL, &c.Nonce, &c.KeyID, &c.PrevNonce, &c.PrevKeyID, &c.Suspect,
				&e.ID, &e.Type, &e.TokenID, &e.Operation, &e.Subject, &e.Actor, &e.From, &e.To,
				&e.Generation, &e.OutcomeStatus, &e.Outcome, &e.At)
			e.Position = c.Pos
			return c, err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, br.Close()
}

// AttemptParams name a claimed delivery's attempt and what it took.
type AttemptParams struct {
	Tenant, Endpoint string
	Pos              int64
	Attempt          int
	DurationMS       int64
}

// Delivered records a 2xx answer with status to an attempt (deliveredSQL)
// and reports whether it was recorded: not when another dispatcher took
// the lease over since.
func Delivered(ctx context.Context, q db.DBTX, a AttemptParams, status int) (bool, error) {
	var n int64
	if err := q.QueryRow(ctx, deliveredSQL, a.Tenant, a.Endpoint, a.Pos, a.Attempt, status, a.DurationMS).Scan(&n); err != nil {
		return false, err
	}
	return n == 1, nil
}

// FailedParams are a failed attempt's outcome (failedSQL).
type FailedParams struct {
	Status              *int // nil when nothing answered
	Error               string
	WaitSeconds         float64 // until the next attempt
	MaxAgeSeconds       float64
	DisableAfterSeconds float64
	Gone                bool // answered 410 Gone
}

// Failed records a failed attempt (failedSQL) and answers the delivery's
// state after it: pending, failed, or parked (its endpoint disabled).
func Failed(ctx context.Context, q db.DBTX, a AttemptParams, f FailedParams) (string, error) {
	var state string
	err := q.QueryRow(ctx, failedSQL, a.Tenant, a.Endpoint, a.Pos, a.Attempt, f.Status, f.Error,
		f.WaitSeconds, f.MaxAgeSeconds, f.DisableAfterSeconds, a.DurationMS, f.Gone).Scan(&state)
	return state, err
}

// UndeliveredCounts are what the webhook metrics report (undeliveredSQL).
type UndeliveredCounts struct {
	Pending, Parked, Disabled int64
	OldestAgeSeconds          float64
}

// Undelivered reads the UndeliveredCounts.
func Undelivered(ctx context.Context, q db.DBTX) (UndeliveredCounts, error) {
	var u UndeliveredCounts
	err := q.QueryRow(ctx, undeliveredSQL).Scan(&u.Pending, &u.OldestAgeSeconds, &u.Parked, &u.Disabled)
	return u, err
}

// EndpointStatsRow is one endpoint's figures (webhookStatsSQL).
type EndpointStatsRow struct {
	ID, URL                      string
	Enabled                      bool
	FailingSince                 *time.Time
	Pending, Parked              int64
	OldestPendingAgeSeconds      float64
	Delivered                    int64
	LagP50Seconds, LagP99Seconds float64
}

// WebhookStats reads tenant's figures per endpoint, the lag over the
// deliveries made in the last window (webhookStatsSQL).
func WebhookStats(ctx context.Context, q db.DBTX, tenant string, window time.Duration) ([]EndpointStatsRow, error) {
	rows, err := q.Query(ctx, webhookStatsSQL, tenant, window.Seconds())
	if err != nil {
		return nil, fmt.Errorf("webhooks: stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[EndpointStatsRow])
	if err != nil {
		return nil, fmt.Errorf("webhooks: stats: %w", err)
	}
	return out, nil
}
