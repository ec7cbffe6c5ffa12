package admin

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
)

// DefaultBatchSize is PurgeOptions.BatchSize's and SweeperConfig.BatchSize's
// default.
const DefaultBatchSize = 1000

// DefaultActor is the actor recorded on the events of a purge whose options
// name none, and of the sweeper's.
const DefaultActor = "sweeper"

// DefaultEventRetention is PurgeOptions.EventRetention's default.
const DefaultEventRetention = 7 * 24 * time.Hour

// PurgeOptions tunes a purge. The zero value is ready to use.
type PurgeOptions struct {
	// BatchSize is the most rows one statement moves or deletes, which bounds
	// how long each statement holds its locks. Zero means DefaultBatchSize.
	BatchSize int
	// MaxBatches bounds the batches of each step, so a large backlog is
	// worked off over several calls. Zero means no bound.
	MaxBatches int
	// Progress, if set, is called after each batch that deleted tokens,
	// with the number it deleted, so a long purge can be followed.
	Progress func(purged int64)
	// Actor is recorded on the events of the tokens the purge expires,
	// parks as unknown or deletes. Empty means DefaultActor.
	Actor string
	// EventRetention is how long an event is kept after it was written,
	// once its token is purged and it has its feed position. Zero means
	// DefaultEventRetention.
	EventRetention time.Duration
}

// Validate reports whether o is usable.
func (o PurgeOptions) Validate() error {
	switch {
	case o.BatchSize < 0:
		return tokend.Invalid(ErrInvalidRequest, "BatchSize", fmt.Sprintf("%d is negative", o.BatchSize))
	case o.MaxBatches < 0:
		return tokend.Invalid(ErrInvalidRequest, "MaxBatches", fmt.Sprintf("%d is negative", o.MaxBatches))
	case o.EventRetention < 0:
		return tokend.Invalid(ErrInvalidRequest, "EventRetention", fmt.Sprintf("%v is negative", o.EventRetention))
	}
	return nil
}

// Purge does what the sweeper does, across all tenants, and returns the
// number of tokens it deleted. In order:
//
//   - pending tokens whose lease lapsed become unknown, unless their
//     operation's policy is takeover, so that they are reported;
//   - issued tokens past their expiry become expired;
//   - consumed, failed, revoked and expired tokens whose retention has passed
//     are deleted, and their intents with them: the same intent ID then
//     issues a new token. Their events stay, with a last "purged" one;
//   - events past the event retention whose token is gone are deleted, and
//     so are webhook deliveries, with their attempts, that finished longer
//     ago than the event retention.
//
// Pending and unknown tokens are never expired or deleted, however old.
//
// Each batch is a statement of its own, committed as it goes, so there is no
// PurgeTx: one transaction around a whole purge would hold every row lock to
// the end. A purge stopped by ctx keeps the batches it committed.
func Purge(ctx context.Context, pool *pgxpool.Pool, opts PurgeOptions) (int64, error) {
	c, err := sweep(ctx, pool, scope{}, opts)
	return c.purged, err
}

// PurgeTenant is Purge for one tenant's tokens only.
func PurgeTenant(ctx context.Context, pool *pgxpool.Pool, tenant string, opts PurgeOptions) (int64, error) {
	c, err := sweep(ctx, pool, scope{tenant: tenant, one: true}, opts)
	return c.purged, err
}

// scope is the tokens a sweep looks at: all tenants' or one's.
type scope struct {
	tenant string
	one    bool
}

// counts is what a sweep did.
type counts struct {
	lapsed, expired, purged, events, deliveries int64
}

// sweep runs the steps of Purge on q, a pool or the sweeper's connection.
func sweep(ctx context.Context, q db.DBTX, s scope, opts PurgeOptions) (counts, error) {
	var c counts
	if err := opts.Validate(); err != nil {
		return c, err
	}
	opts.BatchSize = cmp.Or(opts.BatchSize, DefaultBatchSize)
	opts.Actor = cmp.Or(opts.Actor, DefaultActor)
	opts.EventRetention = cmp.Or(opts.EventRetention, DefaultEventRetention)
	p := store.SweepParams{BatchSize: opts.BatchSize, Actor: opts.Actor, RetentionSeconds: opts.EventRetention.Seconds()}
	// Lapse and expire before deleting, so that a token expiring with no
	// retention left goes in the same sweep.
	var err error
	if c.lapsed, err = tenantBatches(ctx, q, s, opts, nil, store.SweepLapse, p); err != nil {
		return c, fmt.Errorf("admin: purge: lapse leases: %w", err)
	}
	if c.expired, err = tenantBatches(ctx, q, s, opts, nil, store.SweepExpire, p); err != nil {
		return c, fmt.Errorf("admin: purge: expire: %w", err)
	}
	if c.purged, err = tenantBatches(ctx, q, s, opts, opts.Progress, store.SweepPurge, p); err != nil {
		return c, fmt.Errorf("admin: purge: delete: %w", err)
	}
	if c.events, err = tenantBatches(ctx, q, s, opts, nil, store.DeleteEvents, p); err != nil {
		return c, fmt.Errorf("admin: purge: delete events: %w", err)
	}
	if c.deliveries, err = tenantBatches(ctx, q, s, opts, nil, store.DeleteDeliveries, p); err != nil {
		return c, fmt.Errorf("admin: purge: delete webhook deliveries: %w", err)
	}
	return c, nil
}

// tenantBatches runs step's batches for s's one tenant, or, over every
// tenant, for each tenant store.SweepTenants finds with rows due: each batch is a statement on one tenant, which Citus runs on
// one worker (a batch across tenants with FOR UPDATE SKIP LOCKED it
// refuses). MaxBatches bounds the batches of the whole step, across
// tenants.
func tenantBatches(ctx context.Context, q db.DBTX, s scope, opts PurgeOptions, progress func(int64), step store.Sweep, p store.SweepParams) (int64, error) {
	tenants := []string{s.tenant}
	if !s.one {
		var err error
		if tenants, err = store.SweepTenants(ctx, q, step, p); err != nil {
			return 0, err
		}
	}
	var total int64
	left := opts.MaxBatches
	for _, tenant := range tenants {
		o := opts
		o.MaxBatches = left
		n, used, err := batches(ctx, q, o, progress, step, tenant, p)
		total += n
		if err != nil {
			return total, err
		}
		if opts.MaxBatches > 0 {
			if left -= used; left <= 0 {
				break
			}
		}
	}
	return total, nil
}

// batches runs a batch statement until it comes back short or MaxBatches
// ran, and returns the total it moved or deleted and the batches it ran.
func batches(ctx context.Context, q db.DBTX, opts PurgeOptions, progress func(int64), step store.Sweep, tenant string, p store.SweepParams) (total int64, ran int, err error) {
	for batch := 0; opts.MaxBatches == 0 || batch < opts.MaxBatches; batch++ {
		ran++
		n, err := store.SweepBatch(ctx, q, step, tenant, p)
		if err != nil {
			return total, ran, err
		}
		total += n
		if progress != nil && n > 0 {
			progress(n)
		}
		// A short batch means what is left, if anything, is held by others
		// right now: the next sweep's.
		if n < int64(opts.BatchSize) {
			break
		}
	}
	return total, ran, nil
}
