package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// TestDispatchStatementsWalkOnlyWhatTheyNeed: with an endpoint 100 events
// behind the end of a one-tenant trail of 20,000, fanning out and then
// claiming read about as many rows as they hand on, under custom plans and
// under generic ones, instead of joining the whole trail.
func TestDispatchStatementsWalkOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, behind = 20000, 100
	for _, mode := range pgtest.PlanModes {
		pool := pgtest.NewPool(t)
		tokentest.Trail(t, pool, "t", n)
		if _, err := pool.Exec(ctx, `
			INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
			VALUES ('t', 'whe_1', 'http://127.0.0.1:1/', '\x00', 'k1', $1)`, n-behind); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE webhook_endpoints`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, sql, args string
			handed          int
		}{
			{"fan out", dispatch.FanOutSQL, "'t', 'whe_1'", 1}, // one row: the counts
		} {
			read, got := pgtest.Explain(t, pool, mode, c.sql, c.args)
			if got != c.handed {
				t.Errorf("%s, %s: answered %d rows, want %d", mode, c.name, got, c.handed)
			}
			if read > 4*behind+100 {
				t.Errorf("%s, %s: read %d rows for %d owed events", mode, c.name, read, behind)
			}
		}
		read, leased := claimReads(t, pool, mode, 32, 100, 100) // a batch of the 100 owed
		if leased != 32 {
			t.Errorf("%s, claim: leased %d, want 32", mode, leased)
		}
		if read > 4*behind+100 {
			t.Errorf("%s, claim: read %d rows for %d owed events", mode, read, behind)
		}
	}
}

// TestDispatchStatementsStayUnderJIT: with 16 endpoints and 200,000
// delivered deliveries, every statement a round runs is planned at a cost
// under Postgres's jit_above_cost (100,000), under custom and generic
// plans, so no round pays for compiling a plan (the fan-out over every
// endpoint at once used to cost 138,550 here and spent 30 of its 71 ms on
// JIT with nothing to do).
func TestDispatchStatementsStayUnderJIT(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("plans on Citus are the coordinator's custom scans; this runs on plain Postgres")
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tokentest.Trail(t, pool, "t", 12600)
	if _, err := pool.Exec(ctx, `
		INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
		SELECT 't', 'whe_' || i, 'https://hooks.example/' || i, '\x00', 'k1', 12500 FROM generate_series(1, 16) i;
		INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, attempts, finished_at)
		SELECT 't', 'whe_' || i, p, 'evt_' || p, 'delivered', 1, now() FROM generate_series(1, 16) i, generate_series(1, 12500) p`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE webhook_endpoints, webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range pgtest.PlanModes {
		for _, c := range []struct{ name, sql, args string }{
			{"behind", dispatch.BehindSQL, ""},
			{"fan out", dispatch.FanOutSQL, "'t', 'whe_1'"},
			{"claim pick", dispatch.ClaimPickSQL, "32, 4, 16, 't', 16"},
			{"claim lease", dispatch.ClaimLeaseSQL, "'t', 30, 'whe_1', 12501"},
			{"metrics", dispatch.UndeliveredSQL, ""},
		} {
			for _, sql := range []string{"SET plan_cache_mode = " + mode, "PREPARE costed AS " + c.sql} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			execute := "EXECUTE costed"
			if c.args != "" {
				execute += "(" + c.args + ")"
			}
			var plan []struct {
				Plan struct {
					Cost float64 `json:"Total Cost"`
				}
			}
			var out []byte
			if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+execute).Scan(&out); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
				t.Fatalf("%s: %v", out, err)
			}
			if cost := plan[0].Plan.Cost; cost >= 100000 {
				t.Errorf("%s, %s: planned at %.0f, at or over jit_above_cost", mode, c.name, cost)
			}
			if _, err := conn.Exec(ctx, "DEALLOCATE costed"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClaimReadsWhatItLeasesOfABacklogDueAtOnce: an endpoint just enabled
// has its whole backlog due at one instant (enabling makes every parked
// delivery due now); a claim of 4 reads about 4 of its 5,000 rows, under
// custom and generic plans. Before, the claim sorted the endpoint's due
// deliveries by position as well, which read all 5,000 (and, in R3 of
// issue 48, held every other tenant's claim on the instance for up to
// 0.5 s).
func TestClaimReadsWhatItLeasesOfABacklogDueAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backlog = 5000
	for _, mode := range pgtest.PlanModes {
		pool := pgtest.NewPool(t)
		if _, err := pool.Exec(ctx, `
			INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
			VALUES ('t', 'whe_1', 'http://127.0.0.1:1/', '\x00', 'k1', 0);
			INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, next_attempt_at)
			SELECT 't', 'whe_1', p, 'evt_' || p, 'pending', now() - interval '1 minute' FROM generate_series(1, 5000) p`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE webhook_endpoints, webhook_deliveries`); err != nil {
			t.Fatal(err)
		}
		// No event rows: the claim leases 4 and answers none of them, its
		// join to the events finding nothing; what it reads is the point.
		read, leased := claimReads(t, pool, mode, 32, 4, 16)
		if leased != 4 {
			t.Errorf("%s: leased %d, want 4", mode, leased)
		}
		if read > 100 {
			t.Errorf("%s: a claim of 4 read %d rows of a backlog of %d due at once", mode, read, backlog)
		}
	}
}

// TestClaimReadsWhatItLeasesWhateverTheStatistics: a tenant's 10 endpoints
// enabled at once have 20,000 deliveries due at one instant, which the
// table's statistics know nothing of (taken when it held 10 rows, or never
// taken); a claim of 4 an endpoint reads about what it leases, under
// custom and generic plans. Before, the claim leased what it picked with an
// UPDATE joined to the pick, which such statistics planned as a walk of
// each endpoint's due index with the position as a join filter: every due
// row of the endpoint for each one picked (0.3–0.6 s claims in R3 of
// issue 48).
func TestClaimReadsWhatItLeasesWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, stats := range []string{"fresh", "none"} {
		for _, mode := range pgtest.PlanModes {
			pool := pgtest.NewPool(t)
			if _, err := pool.Exec(ctx, `
				INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
				SELECT 't', 'whe_' || i, 'http://127.0.0.1:1/', '\x00', 'k1', 0 FROM generate_series(1, 10) i;
				INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, finished_at)
				SELECT 't', 'whe_' || i, i, 'evt_' || i, 'delivered', now() FROM generate_series(1, 10) i`); err != nil {
				t.Fatal(err)
			}
			if stats == "fresh" {
				if _, err := pool.Exec(ctx, `ANALYZE webhook_endpoints, webhook_deliveries`); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, `
				INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, next_attempt_at)
				SELECT 't', 'whe_' || i, 100 + p, 'evt_' || p, 'pending', now() - interval '1 minute'
				FROM generate_series(1, 10) i, generate_series(1, 2000) p`); err != nil {
				t.Fatal(err)
			}
			read, leased := claimReads(t, pool, mode, 64, 4, 64)
			if leased != 40 {
				t.Errorf("%s statistics, %s: leased %d, want 40 (4 of each of 10 endpoints)", stats, mode, leased)
			}
			if read > 400 {
				t.Errorf("%s statistics, %s: a claim of 40 read %d rows of a backlog of 20,000 due at once", stats, mode, read)
			}
		}
	}
}

// claimReads runs a claim of tenant t (limit, endpoint and tenant
// concurrency), its pick and the lease of each delivery it picked, each
// under EXPLAIN ANALYZE in plan mode, and answers the rows their scans read
// together and how many deliveries it leased.
func claimReads(t *testing.T, pool *pgxpool.Pool, mode string, limit, endpointConcurrency, tenantConcurrency int) (read, leased int) {
	t.Helper()
	ctx := context.Background()
	args := fmt.Sprintf("%d, %d, %d, 't', 16", limit, endpointConcurrency, tenantConcurrency)
	read, _ = pgtest.Explain(t, pool, mode, dispatch.ClaimPickSQL, args)
	// The pick only reads: run again, it picks the same keys.
	var endpoints, positions []string
	rows, err := pool.Query(ctx, dispatch.ClaimPickSQL, limit, endpointConcurrency, tenantConcurrency, "t", 16)
	if err != nil {
		t.Fatal(err)
	}
	var ep string
	var pos int64
	if _, err := pgx.ForEachRow(rows, []any{&ep, &pos}, func() error {
		endpoints, positions = append(endpoints, ep), append(positions, fmt.Sprint(pos))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var before, after int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE leased_until IS NOT NULL`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	r := 0
	for i := range endpoints {
		n, _ := pgtest.Explain(t, pool, mode, dispatch.ClaimLeaseSQL, fmt.Sprintf("'t', 30, '%s', %s", endpoints[i], positions[i]))
		r += n
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE leased_until IS NOT NULL`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	return read + r, after - before
}
