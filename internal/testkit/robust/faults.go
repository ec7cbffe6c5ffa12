package robust

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
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

// killAt kills instance i with SIGKILL, waits a little, and starts it again.
func (e *Env) killAt(ctx context.Context, r *rand.Rand, i int) {
	e.mu.Lock()
	e.down[i] = true
	e.mu.Unlock()
	e.Servers[i].Kill()
	sleep(ctx, between(r, 100*time.Millisecond, 600*time.Millisecond))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down[i] {
		e.Servers[i].Restart()
		delete(e.down, i)
	}
}

func (e *Env) pids() []int {
	pids := make([]int, len(e.Servers))
	for i, s := range e.Servers {
		pids[i] = s.Pid()
	}
	return pids
}

// The sweeper's advisory lock (admin.sweeperLockKey, 0x746f6b656e640001),
// as pg_locks shows a bigint key: its high and low 32 bits.
const sweeperLockHi, sweeperLockLo = 0x746f6b65, 0x6e640001

// killSweeper waits (up to 3 s) for an instance's sweeper to hold its lock,
// which it does for the whole round while the round's batches commit on
// other connections, and kills that instance at once: mid-round. The
// instance is found by the guard connection's client port. When no round
// is seen, a random instance is killed instead (not counted as aimed).
func (e *Env) killSweeper(ctx context.Context, r *rand.Rand) error {
	conn, err := pgx.Connect(ctx, e.DBURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(3 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var port int
		err := conn.QueryRow(ctx, `SELECT coalesce(a.client_port, 0) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
			uint32(sweeperLockHi), uint32(sweeperLockLo)).Scan(&port)
		if err == nil && port != 0 {
			if i := socketOwner(port, e.pids()); i >= 0 {
				e.aimed.Add(1)
				e.killAt(ctx, r, i)
				return nil
			}
		} else if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
	e.killAt(ctx, r, r.IntN(len(e.Servers)))
	return nil
}

// killDispatcher holds the next webhook delivery at the receiver (waiting
// up to 3 s for one), kills the instance whose dispatcher sent it while it
// waits for its answer, then lets the receiver answer into the closed
// connection. The dispatchers must send it again once the dead one's
// lease on it runs out. When no delivery comes, a random instance is
// killed instead (not counted as aimed).
func (e *Env) killDispatcher(ctx context.Context, r *rand.Rand) error {
	h, ok := e.Hooks.Hold(ctx, 3*time.Second)
	if !ok {
		e.killAt(ctx, r, r.IntN(len(e.Servers)))
		return nil
	}
	i := socketOwner(portOf(h.from), e.pids())
	if i < 0 {
		close(h.release)
		e.killAt(ctx, r, r.IntN(len(e.Servers)))
		return nil
	}
	e.aimed.Add(1)
	e.mu.Lock()
	e.down[i] = true
	e.mu.Unlock()
	e.Servers[i].Kill()
	close(h.release)
	sleep(ctx, between(r, 100*time.Millisecond, 600*time.Millisecond))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down[i] {
		e.Servers[i].Restart()
		delete(e.down, i)
	}
	return nil
}

// restartBouncer stops the scenario's PgBouncer with sig and starts it
// again after 0.1–0.5 s.
func (e *Env) restartBouncer(ctx context.Context, r *rand.Rand, sig syscall.Signal) error {
	e.Bouncer.Stop(sig)
	sleep(ctx, between(r, 100*time.Millisecond, 500*time.Millisecond))
	return e.Bouncer.Restart()
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
	// PgBouncer (transaction pooling) between tokend and Postgres, stopped
	// by its safe shutdown (SIGINT: waits for the transactions in flight)
	// or its immediate one (SIGTERM), and started again.
	"pgbouncer-restart": {Name: "pgbouncer-restart", PgBouncer: true, Every: 2 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
			return e.restartBouncer(ctx, r, []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[r.IntN(2)])
		}},
	"pgbouncer-kill9": {Name: "pgbouncer-kill9", PgBouncer: true, Every: 2 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
			return e.restartBouncer(ctx, r, syscall.SIGKILL)
		}},
	// The sweeper killed mid-round: half the issues expire within 2 s, a
	// lease operation of 1 s whose holders now and then vanish, a round
	// every 200 ms; webhooks on, so the deliveries of what it does are
	// checked too.
	"sweeper-kill9": {Name: "sweeper-kill9", Webhooks: true, Sweep: 200 * time.Millisecond, Expiring: 50, ShortLeases: true,
		Aimed: true, Every: 2 * time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error { return e.killSweeper(ctx, r) }},
	// One instance's clock stepped: restarted with its process clock
	// (internal/infra/clock, a tokend_faketime build) moved by up to a
	// day either way, so the instances disagree by that much while the
	// traffic runs. tokend decides expiry, lease end and retention by
	// Postgres's now(), so no answer may change (docs/robustness.md, "The
	// clock step", says what this covers and what it does not).
	"clock-step": {Name: "clock-step", BuildTags: "tokend_faketime", Expiring: 50, ShortLeases: true, Every: 2 * time.Second,
		Inject: func(ctx context.Context, e *Env, r *rand.Rand) error {
			step := []string{"-25h", "-1h", "-30s", "0s", "30s", "1h", "25h"}[r.IntN(7)]
			e.restartInstance(ctx, r, func(i int) {
				e.T.Logf("clock-step: instance %d restarts with its clock at %s", i, step)
				e.Servers[i].SetEnv(append(slices.Clone(e.env), "TOKEND_FAKETIME_OFFSET="+step))
				_ = e.Servers[i].Stop()
			})
			return nil
		}},
	// The webhook dispatcher killed with a delivery in flight.
	"webhook-kill9": {Name: "webhook-kill9", Webhooks: true, Expiring: 30, ShortLeases: true,
		Aimed: true, Every: 2 * time.Second, Inject: func(ctx context.Context, e *Env, r *rand.Rand) error { return e.killDispatcher(ctx, r) }},
}

// FaultNames is every fault, in the order the long pass runs them.
var FaultNames = []string{"none", "kill9", "sigterm", "pg-restart-fast", "pg-restart-immediate",
	"net-reset", "net-blackhole", "net-latency", "redis-kill", "redis-flush", "redis-old-snapshot",
	"pgbouncer-restart", "pgbouncer-kill9", "sweeper-kill9", "webhook-kill9", "clock-step"}

// pgbouncerMissing says why the PgBouncer scenarios cannot run here, "" if
// they can.
func pgbouncerMissing() string {
	if pgbouncerPath() == "" {
		return "pgbouncer is not installed (not on PATH, not /usr/sbin/pgbouncer): the PgBouncer scenarios skip"
	}
	return ""
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
