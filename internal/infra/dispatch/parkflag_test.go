package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// rowWrites is how many rows of webhook_endpoints and webhook_deliveries
// f updated, inserted or deleted in its transaction, as Postgres counts
// them (pg_stat_xact_user_tables, read before and after f: the view also
// holds what the backend's earlier transactions did and has not reported
// yet). On Citus the shards' writes happen on the workers, which the
// coordinator's view does not count: counted is false there, and f runs
// all the same (the statements are the ones counted on plain Postgres).
func rowWrites(t *testing.T, pool *pgxpool.Pool, f func(tx pgx.Tx)) (endpoints, deliveries int64, counted bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if pgtest.Citus() {
		f(tx)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return 0, 0, false
	}
	read := func() (e, d int64) {
		if err := tx.QueryRow(ctx, `
			SELECT coalesce(sum(n_tup_upd + n_tup_ins + n_tup_del) FILTER (WHERE relname = 'webhook_endpoints'), 0),
			       coalesce(sum(n_tup_upd + n_tup_ins + n_tup_del) FILTER (WHERE relname = 'webhook_deliveries'), 0)
			FROM pg_stat_xact_user_tables`).Scan(&e, &d); err != nil {
			t.Fatal(err)
		}
		return e, d
	}
	e0, d0 := read()
	f(tx)
	e1, d1 := read()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return e1 - e0, d1 - d0, true
}

// TestDisableAndEnableWriteOnlyTheEndpoint: disabling and enabling an
// endpoint with a backlog of 300 deliveries never tried writes the
// endpoint's row and no delivery (issue 48, R3: each rewrote the whole
// backlog, pending <-> parked, holding back every tenant's feed positions).
// The backlog is parked meanwhile and delivered once enabled.
func TestDisableAndEnableWriteOnlyTheEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "")
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	set := func(on bool) (endpoints, deliveries int64, counted bool) {
		return rowWrites(t, pool, func(tx pgx.Tx) {
			if _, ok, err := store.SetEndpointEnabled(ctx, tx, "a", ep.ID, on, "operator"); err != nil || !ok {
				t.Fatalf("set enabled %v: %v, %v", on, ok, err)
			}
		})
	}
	if e, n, counted := set(false); counted && (e != 1 || n != 0) {
		t.Fatalf("disable wrote %d endpoint rows and %d deliveries", e, n)
	}
	writeEvents(t, pool, "a", 300)
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == 300
	})
	if n := parkedIn(t, pool, ep.ID); n != 300 {
		t.Errorf("the record shows %d parked, want 300", n)
	}
	for i, on := range []bool{true, false, true, false, true} {
		if e, n, counted := set(on); counted && (e != 1 || n != 0) {
			t.Errorf("step %d, enabled=%v with 300 deliveries owed: wrote %d endpoint rows and %d deliveries, want 1 and 0", i, on, e, n)
		}
	}
	if c.got.Load() != 0 {
		t.Errorf("%d attempts while the backlog was parked or between flips", c.got.Load())
	}
	until(t, d, func() bool { return c.effects() == 300 })
}

// TestDisabledBacklogShowsParkedEverywhere: a disabled endpoint's pending
// deliveries, stored pending, are parked in its record, in
// tokend_webhook_parked and in the tenant's webhook-stats, and are not lag
// (tokend_webhook_undelivered, its age, the stats' pending and oldest
// age); a delivery in flight at the disable stays pending until its
// attempt is recorded, then is parked too.
func TestDisabledBacklogShowsParkedEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	writeEvents(t, pool, "a", 4)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour})
	until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE attempts > 0`) == 4 })
	// One delivery in flight (leased by an instance that has not answered).
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = now() + interval '1 hour'
		WHERE pos = (SELECT min(pos) FROM webhook_deliveries)`); err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`); n != 4 {
		t.Errorf("%d deliveries stored pending, want all 4 (the disable writes none)", n)
	}
	check := func(parked, pending int) {
		t.Helper()
		if n := parkedIn(t, pool, ep.ID); n != parked {
			t.Errorf("the record shows %d parked, want %d", n, parked)
		}
		m := gather(t, d)
		if m["tokend_webhook_parked"] != float64(parked) || m["tokend_webhook_undelivered"] != float64(pending) {
			t.Errorf("metrics %v, want %d parked, %d undelivered", m, parked, pending)
		}
		if pending == 0 && m["tokend_webhook_undelivered_oldest_age_seconds"] != 0 {
			t.Errorf("oldest undelivered age %v with nothing but parked deliveries, want 0", m["tokend_webhook_undelivered_oldest_age_seconds"])
		}
		s, err := dispatch.Stats(ctx, pool, "a")
		if err != nil {
			t.Fatal(err)
		}
		if s.Parked != int64(parked) || s.Pending != int64(pending) || (pending == 0) != (s.OldestPendingAgeSeconds == 0) {
			t.Errorf("webhook-stats %d parked, %d pending, oldest %vs; want %d parked, %d pending", s.Parked, s.Pending, s.OldestPendingAgeSeconds, parked, pending)
		}
	}
	check(3, 1)
	// The attempt in flight ends: its lease runs out.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = now() WHERE leased_until IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	check(4, 0)
	c.down.Store(false)
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	check(0, 4)
	until(t, d, func() bool { return c.effects() == 4 })
}

// TestMaxAgeRestartsWhenEnabled: a delivery older than the maximum age
// when its endpoint is enabled again is tried with a new maximum age from
// then: a failed attempt leaves it pending, not failed for good. Before,
// the enable rewrote its created_at; now the endpoint's resumed_at says it.
func TestMaxAgeRestartsWhenEnabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 2)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, MaxAge: time.Hour, BackoffBase: time.Hour})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == 2
	})
	// Parked for two hours, twice the maximum age.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET created_at = now() - interval '2 hours', next_attempt_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool { return c.got.Load() >= 2 })
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending' AND attempts = 1`); n != 2 {
		t.Errorf("%d deliveries pending after a failed attempt, want 2 (%d failed for good)", n,
			count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'`))
	}
	// Past the maximum age since the enable, the next failure is final.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET resumed_at = now() - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'`) == 2
	})
}

// previousSetEnabledSQL is what the previous release (RELEASES' last line,
// 729ffb2) runs to disable and enable an endpoint (its
// store.endpointSetEnabledSQL, RETURNING cut to the id): disabling parks
// the pending deliveries not in flight; enabling resumes parked ones, due
// now, with a new created_at.
const previousSetEnabledSQL = `
WITH w AS (
    UPDATE webhook_endpoints
    SET enabled = $3, disabled_reason = CASE WHEN $3 THEN NULL ELSE $4 END,
        failing_since = CASE WHEN $3 THEN NULL ELSE failing_since END
    WHERE tenant_id = $1 AND id = $2
    RETURNING id
), p AS (
    UPDATE webhook_deliveries d
    SET state = CASE WHEN $3 THEN 'pending' ELSE 'parked' END,
        next_attempt_at = CASE WHEN $3 THEN (SELECT now()) ELSE d.next_attempt_at END,
        created_at = CASE WHEN $3 THEN (SELECT now()) ELSE d.created_at END
    FROM w
    WHERE d.tenant_id = $1 AND d.endpoint_id = w.id AND d.state = CASE WHEN $3 THEN 'parked' ELSE 'pending' END
      AND ($3 OR d.leased_until IS NULL OR d.leased_until <= (SELECT now()))
)
SELECT * FROM w`

// TestParkedByThePreviousReleaseResumes: during a rolling upgrade, rows
// the previous release parked (its disable) are parked in this release's
// record and metric, and this release's enable resumes them, more than
// one batch of them, all delivered; and the previous release's enable
// after this release's disable delivers what this one left pending.
func TestParkedByThePreviousReleaseResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	writeEvents(t, pool, "a", store.ResumeBatch+50)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour, Batch: 1})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == store.ResumeBatch+50
	})
	if _, err := pool.Exec(ctx, previousSetEnabledSQL, "a", ep.ID, false, "operator"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'parked'`); n != store.ResumeBatch+50 {
		t.Fatalf("the previous release parked %d, want %d", n, store.ResumeBatch+50)
	}
	if n := parkedIn(t, pool, ep.ID); n != store.ResumeBatch+50 {
		t.Errorf("the record shows %d parked, want %d", n, store.ResumeBatch+50)
	}
	if m := gather(t, d); m["tokend_webhook_parked"] != store.ResumeBatch+50 || m["tokend_webhook_undelivered"] != 0 {
		t.Errorf("metrics %v, want %d parked, 0 undelivered", m, store.ResumeBatch+50)
	}
	c.down.Store(false)
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'parked'`); n != 0 {
		t.Errorf("%d left parked by the previous release still parked after this release's enable", n)
	}
	// Delivered by a dispatcher of the default batch: one delivery a round
	// took longer than the rounds' bound on a loaded Citus cluster.
	full := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour})
	until(t, full, func() bool { return c.effects() == store.ResumeBatch+50 })

	// This release disables, the previous one enables.
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 3)
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == store.ResumeBatch+53
	})
	if _, err := pool.Exec(ctx, previousSetEnabledSQL, "a", ep.ID, true, ""); err != nil {
		t.Fatal(err)
	}
	until(t, full, func() bool { return c.effects() == store.ResumeBatch+53 })
}

// TestLeaseRefusesADisabledEndpoint: a claim's lease of a delivery it
// picked leases nothing when the endpoint was disabled since the pick.
// The previous release parked the delivery then, which the lease tested;
// now the disable writes the endpoint alone, and the lease reads its flag.
func TestLeaseRefusesADisabledEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "")
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 1)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == 1
	})
	var pos int64
	if err := pool.QueryRow(ctx, `SELECT pos FROM webhook_deliveries`).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, dispatch.ClaimLeaseSQL, "a", 30.0, ep.ID, pos)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if n != 0 || count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE leased_until IS NOT NULL OR attempts > 0`) != 0 {
		t.Errorf("leased %d deliveries of a disabled endpoint", n)
	}
	if c.got.Load() != 0 {
		t.Errorf("%d attempts to a disabled endpoint", c.got.Load())
	}
}
