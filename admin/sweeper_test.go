package admin

import (
	"bytes"
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/token"
)

// pools returns n pools on one fresh database, as n tokend processes would
// have.
func pools(t *testing.T, n int) []*pgxpool.Pool {
	t.Helper()
	url := ledgertest.NewURL(t)
	var ps []*pgxpool.Pool
	for range n {
		p, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		ps = append(ps, p)
	}
	return ps
}

func newSweeper(t *testing.T, cfg SweeperConfig) *Sweeper {
	t.Helper()
	s, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lockHolders counts the sessions holding the sweeper's advisory lock.
func (e *env) lockHolders() int64 {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND (classid::bigint << 32 | objid::bigint) = $1`, sweeperLockKey)
}

// purgeable makes n revoked tokens whose retention has passed.
func (e *env) purgeable(n int) {
	e.t.Helper()
	for range n {
		e.age(e.tokenIn(tenant, token.Revoked).Token.ID)
	}
}

func TestSweeperConfig(t *testing.T) {
	t.Parallel()
	pool := &pgxpool.Pool{} // never used: NewSweeper only keeps it
	tests := []struct {
		name     string
		cfg      SweeperConfig
		ok       bool
		interval time.Duration
		batch    int
	}{
		{"defaults", SweeperConfig{Pool: pool}, true, DefaultSweepInterval, DefaultBatchSize},
		{"given", SweeperConfig{Pool: pool, Interval: time.Second, BatchSize: 7}, true, time.Second, 7},
		{"no pool", SweeperConfig{}, false, 0, 0},
		{"negative interval", SweeperConfig{Pool: pool, Interval: -time.Second}, false, 0, 0},
		{"negative batch", SweeperConfig{Pool: pool, BatchSize: -1}, false, 0, 0},
	}
	for _, tt := range tests {
		s, err := NewSweeper(tt.cfg)
		if (err == nil) != tt.ok || (err == nil) != (tt.cfg.Validate() == nil) {
			t.Errorf("%s: NewSweeper error = %v, Validate = %v; want ok %v", tt.name, err, tt.cfg.Validate(), tt.ok)
			continue
		}
		if err != nil {
			continue
		}
		if s.interval != tt.interval || s.opts.BatchSize != tt.batch || s.logger == nil {
			t.Errorf("%s: interval %v, batch %d, logger %v; want %v, %d and a logger", tt.name, s.interval, s.opts.BatchSize, s.logger, tt.interval, tt.batch)
		}
	}
}

// While one sweeper sweeps, another, on another pool as in another process,
// skips its turn; once the first is done the second may sweep, and the
// tokens are counted once.
func TestSweeperOneAtATime(t *testing.T) {
	t.Parallel()
	ps := pools(t, 2)
	e := newEnvOn(t, ps[0])
	e.purgeable(5)
	ctx := context.Background()

	first := newSweeper(t, SweeperConfig{Pool: ps[0]})
	second := newSweeper(t, SweeperConfig{Pool: ps[1]})
	entered, release := make(chan struct{}), make(chan struct{})
	first.inLock = func(ctx context.Context, sweep func() (counts, error)) (counts, error) {
		close(entered)
		<-release
		return sweep()
	}
	type result struct {
		c   counts
		ran bool
		err error
	}
	done := make(chan result)
	go func() {
		c, ran, err := first.sweepOnce(ctx)
		done <- result{c, ran, err}
	}()
	<-entered

	if n := e.lockHolders(); n != 1 {
		t.Errorf("%d sessions hold the sweeper lock while the first sweeps, want 1", n)
	}
	// The holder is inside a transaction: the lock ends with it, and a
	// transaction-pooling proxy cannot strand it on a backend it hands to
	// someone else between statements.
	if n := e.count(`SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND (l.classid::bigint << 32 | l.objid::bigint) = $1 AND a.xact_start IS NULL`, sweeperLockKey); n != 0 {
		t.Errorf("%d sessions hold the sweeper lock outside a transaction, want 0", n)
	}
	c, ran, err := second.sweepOnce(ctx)
	if err != nil || ran || c != (counts{}) {
		t.Errorf("second sweep while the first holds the lock = %+v, ran %v, %v; want skipped", c, ran, err)
	}
	if n := e.count(`SELECT count(*) FROM tokens`); n != 5 {
		t.Errorf("%d tokens left while the first sweeper waits, want all 5", n)
	}

	close(release)
	r := <-done
	if r.err != nil || !r.ran || r.c.purged != 5 {
		t.Errorf("first sweep = %+v, ran %v, %v; want 5 purged", r.c, r.ran, r.err)
	}
	if n := e.lockHolders(); n != 0 {
		t.Errorf("%d sessions hold the sweeper lock after the sweep, want 0", n)
	}
	c, ran, err = second.sweepOnce(ctx)
	if err != nil || !ran || c.purged != 0 {
		t.Errorf("second sweep after the first = %+v, ran %v, %v; want it to run and find nothing", c, ran, err)
	}
}

// Sweepers of several processes racing round after round: never two in the
// lock at once, and every token purged exactly once.
func TestSweepersRacing(t *testing.T) {
	t.Parallel()
	const sweepers, rounds, tokens = 4, 15, 40
	ps := pools(t, sweepers)
	e := newEnvOn(t, ps[0])
	e.purgeable(tokens)

	var inside, most, purged, ran, skipped atomic.Int64
	var wg sync.WaitGroup
	for i := range sweepers {
		s := newSweeper(t, SweeperConfig{Pool: ps[i], BatchSize: 3})
		s.inLock = func(ctx context.Context, sweep func() (counts, error)) (counts, error) {
			n := inside.Add(1)
			defer inside.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return sweep()
		}
		wg.Go(func() {
			for range rounds {
				c, ok, err := s.sweepOnce(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					ran.Add(1)
				} else {
					skipped.Add(1)
				}
				purged.Add(c.purged)
			}
		})
	}
	wg.Wait()
	t.Logf("%d sweeps ran, %d skipped", ran.Load(), skipped.Load())
	if most.Load() != 1 {
		t.Errorf("at most %d sweepers in the lock at once, want 1", most.Load())
	}
	if purged.Load() != tokens {
		t.Errorf("sweepers purged %d in all, want %d", purged.Load(), tokens)
	}
	if n := e.count(`SELECT count(*) FROM tokens`); n != 0 {
		t.Errorf("%d tokens left", n)
	}
}

// A sweep stopped by its context still gives the lock back, so the next
// sweeper is not locked out for good.
func TestSweeperReleasesLockWhenStopped(t *testing.T) {
	t.Parallel()
	ps := pools(t, 2)
	e := newEnvOn(t, ps[0])
	e.purgeable(3)

	first := newSweeper(t, SweeperConfig{Pool: ps[0]})
	ctx, cancel := context.WithCancel(context.Background())
	first.inLock = func(_ context.Context, sweep func() (counts, error)) (counts, error) {
		cancel()
		return sweep()
	}
	if _, ran, err := first.sweepOnce(ctx); !ran || !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped sweep: ran %v, %v; want it to have run and been canceled", ran, err)
	}
	if n := e.lockHolders(); n != 0 {
		t.Errorf("%d sessions hold the sweeper lock after a stopped sweep, want 0", n)
	}
	second := newSweeper(t, SweeperConfig{Pool: ps[1]})
	if c, ran, err := second.sweepOnce(context.Background()); err != nil || !ran || c.purged != 3 {
		t.Errorf("next sweep = %+v, ran %v, %v; want 3 purged", c, ran, err)
	}
}

// Run sweeps at once and then every interval, logs what it did, and returns
// when its context ends, giving the lock back.
func TestSweeperRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.purgeable(3)
	lapsing := e.tokenIn(tenant, token.Pending)
	e.exec(`UPDATE tokens SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, lapsing.Token.ID)

	var logs bytes.Buffer
	s := newSweeper(t, SweeperConfig{Pool: e.pool, Interval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	swept := make(chan counts)
	s.inLock = func(ctx context.Context, sweep func() (counts, error)) (counts, error) {
		c, err := sweep()
		if err == nil {
			select {
			case swept <- c:
			case <-ctx.Done(): // a sweep after the test stopped listening
			}
		}
		return c, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	if c := <-swept; c != (counts{lapsed: 1, purged: 3}) {
		t.Errorf("first sweep = %+v, want 1 lapsed and 3 purged", c)
	}
	if c := <-swept; c != (counts{}) {
		t.Errorf("second sweep = %+v, want nothing left to do", c)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if n := e.lockHolders(); n != 0 {
		t.Errorf("%d sessions hold the sweeper lock after Run returned", n)
	}
	if got := e.state(tenant, lapsing.Token.ID); got != token.Unknown {
		t.Errorf("lapsed token is %s, want unknown", got)
	}
	out := logs.String()
	for _, want := range []string{"lapsed=1 expired=0 purged=3", "level=WARN", "tokens=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "admin: swept"); n != 1 {
		t.Errorf("%d sweep lines logged, want 1 (the empty sweeps say nothing):\n%s", n, out)
	}
}
