package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
)

// DefaultSweepInterval is SweeperConfig.Interval's default.
const DefaultSweepInterval = time.Minute

// sweeperLockKey names the advisory lock only one sweeper holds at a time:
// "tokend" in ASCII, then the number of the lock among tokend's.
const sweeperLockKey int64 = 0x746f6b656e64_0001

// SweeperConfig configures a Sweeper.
type SweeperConfig struct {
	// Pool is the database to sweep. While sweeping, the sweeper holds one
	// of its connections for the lock and runs the batches on another.
	// Required.
	Pool *pgxpool.Pool
	// Interval is the time from the start of one sweep to the start of the
	// next. Zero means DefaultSweepInterval.
	Interval time.Duration
	// BatchSize is PurgeOptions.BatchSize. Zero means DefaultBatchSize.
	BatchSize int
	// EventRetention is PurgeOptions.EventRetention. Zero means
	// DefaultEventRetention.
	EventRetention time.Duration
	// Logger receives a line for each sweep that changed something and for
	// each that failed. Nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports whether c is usable.
func (c SweeperConfig) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("admin: SweeperConfig.Pool is required")
	case c.Interval < 0:
		return fmt.Errorf("admin: SweeperConfig.Interval %v is negative", c.Interval)
	case c.BatchSize < 0:
		return fmt.Errorf("admin: SweeperConfig.BatchSize %d is negative", c.BatchSize)
	case c.EventRetention < 0:
		return fmt.Errorf("admin: SweeperConfig.EventRetention %v is negative", c.EventRetention)
	}
	return nil
}

// Sweeper purges across all tenants in the background, as Purge does, at a
// fixed interval. Every tokend process may run one: a Postgres advisory lock
// lets only one of them sweep at a time, and the others skip their turn.
type Sweeper struct {
	pool     *pgxpool.Pool
	interval time.Duration
	opts     PurgeOptions
	logger   *slog.Logger

	// inLock, a test hook, runs each sweep (sweep) while the lock is held.
	inLock func(ctx context.Context, sweep func() (counts, error)) (counts, error)
}

// NewSweeper returns a Sweeper configured by cfg.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{
		pool:     cfg.Pool,
		interval: cmp.Or(cfg.Interval, DefaultSweepInterval),
		opts: PurgeOptions{BatchSize: cmp.Or(cfg.BatchSize, DefaultBatchSize), Actor: DefaultActor,
			EventRetention: cmp.Or(cfg.EventRetention, DefaultEventRetention)},
		logger: cmp.Or(cfg.Logger, slog.Default()),
	}, nil
}

// Run sweeps at once and then every Interval until ctx is done, and returns
// ctx's error. A failed sweep is logged and retried at the next interval, so
// a database restart does not stop the sweeper.
func (s *Sweeper) Run(ctx context.Context) error {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		start := time.Now()
		c, ran, err := s.sweepOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			s.logger.ErrorContext(ctx, "admin: sweep failed", "error", err)
		case !ran:
			s.logger.DebugContext(ctx, "admin: sweep skipped: another sweeper holds the lock")
		case c != counts{}:
			s.logger.InfoContext(ctx, "admin: swept", "lapsed", c.lapsed, "expired", c.expired, "purged", c.purged, "duration", time.Since(start))
		}
		if c.lapsed > 0 {
			s.logger.WarnContext(ctx, "admin: leases lapsed; the tokens are unknown until an operator reconciles them", "tokens", c.lapsed)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// sweepOnce sweeps if no other sweeper holds the lock; ran reports whether it
// did. The lock is held by a guard transaction, open for the sweep and
// rolled back after it; the batches commit one by one on other connections.
// The guard takes no transaction id (an advisory lock needs none), so it
// holds back neither vacuum's horizon for writes nor the event feed.
func (s *Sweeper) sweepOnce(ctx context.Context) (c counts, ran bool, err error) {
	guard, err := s.pool.Begin(ctx)
	if err != nil {
		return c, false, fmt.Errorf("admin: sweep: %w", err)
	}
	defer guard.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // ends the guard, and so the lock
	if ran, err = store.TryLock(ctx, guard, sweeperLockKey); err != nil {
		return c, false, fmt.Errorf("admin: sweep: %w", err)
	}
	if !ran {
		return c, false, nil
	}
	run := func() (counts, error) { return sweep(ctx, s.pool, scope{}, s.opts) }
	if s.inLock != nil {
		c, err = s.inLock(ctx, run)
	} else {
		c, err = run()
	}
	return c, true, err
}
