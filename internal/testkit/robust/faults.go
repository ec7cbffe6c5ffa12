package robust

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// between is a random duration in [lo, hi).
func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// restartInstance stops instance i with stop, waits a little, and starts
// it again on the same address.
func (e *Env) restartInstance(ctx context.Context, r *rand.Rand, stop func(i int)) {
	i := r.IntN(len(e.Servers))
	e.mu.Lock()
	e.down[i] = true
	e.mu.Unlock()
	stop(i)
	sleep(ctx, between(r, 100*time.Millisecond, 600*time.Millisecond))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down[i] {
		e.Servers[i].Restart()
		delete(e.down, i)
	}
}

// Faults are the nemeses, by name. The sweeper runs every second in each
// instance (TOKEND_SWEEP_INTERVAL=1s), so a kill often lands mid-round.
var Faults = map[string]Fault{
	"none": {Name: "none"},
	"kill9": {Name: "kill9", Every: 2 * time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
		e.restartInstance(ctx, r, func(i int) { e.Servers[i].Kill() })
		return nil
	}},
	"sigterm": {Name: "sigterm", Every: 2 * time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
		e.restartInstance(ctx, r, func(i int) { _ = e.Servers[i].Stop() })
		return nil
	}},
	"pg-restart-fast": {Name: "pg-restart-fast", Every: 3 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error { return e.PG.Restart("fast") }},
	"pg-restart-immediate": {Name: "pg-restart-immediate", Every: 3 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error { return e.PG.Restart("immediate") }},
	"net-reset": {Name: "net-reset", Proxy: true, Every: time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error { e.Proxy.Reset(); return nil }},
	"net-blackhole": {Name: "net-blackhole", Proxy: true, Every: 3 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
			e.Proxy.Blackhole(true)
			sleep(ctx, between(r, 300*time.Millisecond, 2*time.Second))
			e.Proxy.Blackhole(false)
			return nil
		}},
	"net-latency": {Name: "net-latency", Proxy: true, Every: 2 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
			e.Proxy.SetLatency(between(r, 10*time.Millisecond, 150*time.Millisecond))
			sleep(ctx, between(r, 500*time.Millisecond, 3*time.Second))
			e.Proxy.SetLatency(0)
			return nil
		}},
	"redis-kill": {Name: "redis-kill", Every: 2 * time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
		e.Redis.Kill()
		sleep(ctx, between(r, 100*time.Millisecond, time.Second))
		return e.Redis.Restart()
	}},
	"redis-flush": {Name: "redis-flush", Every: time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
		return e.Redis.Flush(ctx)
	}},
	// Every other round takes a snapshot; the round after restores it, so
	// the cache goes back to entries written before the changes since.
	"redis-old-snapshot": {Name: "redis-old-snapshot", Every: time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
		e.mu.Lock()
		snap := e.snap
		e.snap = ""
		e.mu.Unlock()
		if snap != "" {
			return e.Redis.RestoreSnapshot(snap)
		}
		snap, err := e.Redis.Snapshot(ctx)
		e.mu.Lock()
		e.snap = snap
		e.mu.Unlock()
		return err
	}},
}

// FaultNames is every fault, in the order the long pass runs them.
var FaultNames = []string{"none", "kill9", "sigterm", "pg-restart-fast", "pg-restart-immediate",
	"net-reset", "net-blackhole", "net-latency", "redis-kill", "redis-flush", "redis-old-snapshot"}

// pgbouncerMissing says why the PgBouncer scenario cannot run here, "" if it can.
func pgbouncerMissing() string {
	if _, err := exec.LookPath("pgbouncer"); err != nil {
		return fmt.Sprintf("pgbouncer is not installed (%v): the PgBouncer restart scenario is not run", err)
	}
	return "the PgBouncer restart scenario is not written yet"
}

// neighbours runs another database's load on the scenario's Postgres
// server until ctx ends, as on a shared server: short write transactions,
// and now and then one that keeps its transaction id open for a while.
// The feed positions events only once every older transaction on the
// server has ended, so this moves when and in which batches they are
// positioned.
func neighbours(ctx context.Context, e *Env, r *rand.Rand) error {
	admin, err := pgx.Connect(ctx, e.DBURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if e.PG == nil {
		return nil // on the shared server: it has neighbours of its own
	}
	_, _ = admin.Exec(ctx, "CREATE DATABASE neighbour")
	u := e.PG.URL("neighbour")
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			_, _ = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS n (id bigserial PRIMARY KEY, v int)")
			for ctx.Err() == nil {
				hold := time.Duration(0)
				if w == 0 {
					hold = between(r, 100*time.Millisecond, 1500*time.Millisecond)
				}
				tx, err := conn.Begin(ctx)
				if err != nil {
					sleep(ctx, 100*time.Millisecond)
					continue
				}
				_, _ = tx.Exec(ctx, "INSERT INTO n (v) VALUES (1)")
				sleep(ctx, hold)
				_ = tx.Commit(context.WithoutCancel(ctx))
				sleep(ctx, between(r, time.Millisecond, 20*time.Millisecond))
			}
		})
	}
	wg.Wait()
	return nil
}
