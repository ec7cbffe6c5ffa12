package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestDeliveryStatementsStayFlatAsTheBacklogGrows is
// TestPointStatementsStayFlatAsTokensGrow for the statements that read or
// change one webhook delivery: the dispatcher runs one of them for every
// attempt, and webhook_deliveries has, besides its primary key, partial
// indexes leading with (tenant_id, endpoint_id) or (tenant_id, pos) whose
// predicate a point statement's `state = 'pending'` implies. On a fresh
// database they run eight times through pgx's statement cache while each
// endpoint owes a handful of deliveries; then one endpoint's backlog grows
// to 20,000 pending deliveries (half due, half waiting out a backoff) and
// 2,000 delivered ones, another tenant's to 200, and each statement,
// through the same prepared statement, must touch about as many buffers
// per call as before: a plan that walks the endpoint's due index with the
// position as a filter touches hundreds.
func TestDeliveryStatementsStayFlatAsTheBacklogGrows(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("on Citus a statement's plan is the coordinator's custom scan; the workers plan the shards")
	}
	ctx := context.Background()
	conn, run := planConn(ctx, t, pgtest.NewPool(t))
	for _, table := range []string{"webhook_endpoints", "webhook_deliveries", "webhook_attempts", "event_positions", "token_events"} {
		run(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`)
	}
	run(`INSERT INTO webhook_endpoints (tenant_id, id, url, secret_nonce, secret_key_id, feed_pos)
	     VALUES ('big', 'whe_1', 'http://127.0.0.1:1/', '\x00', 'k1', 0),
	            ('big', 'whe_2', 'http://127.0.0.1:1/', '\x00', 'k1', 0),
	            ('small', 'whe_1', 'http://127.0.0.1:1/', '\x00', 'k1', 0)`)
	load := func(tenant, endpoint string, from, to int) {
		t.Helper()
		run(loadDeliveriesSQL, tenant, endpoint, from, to)
	}
	load("big", "whe_1", 1, 3)
	load("big", "whe_2", 1, 2)
	load("small", "whe_1", 1, 1)
	run(`UPDATE webhook_endpoints SET feed_pos = 2 WHERE tenant_id = 'big' AND id = 'whe_2'`)

	const tenant, endpoint, pos, attempt = "big", "whe_1", int64(2), 1
	// grown, when set, are the arguments after the loads: those of a page
	// that reads as many events as the first arguments did. The claim's
	// lease, the fan-out and the feed read look an event up by its key:
	// both indexes of token_events lead with tenant_id, and the plan made
	// on a tiny table takes the newest, which must be the primary key
	// (migration 023), not the settling index, whose walk grows with the
	// tenant's events.
	cases := []struct {
		name  string
		sql   string
		args  []any
		grown []any
	}{
		{"claim lease", store.Statements().ClaimLeaseSQL, []any{tenant, 30, endpoint, pos}, nil},
		{"delivered", store.Statements().DeliveredSQL, []any{tenant, endpoint, pos, attempt, 200, 5}, nil},
		{"failed", store.Statements().FailedSQL, []any{tenant, endpoint, pos, attempt, 500, "answered 500", 30.0, 86400.0, 86400.0, 5, false}, nil},
		{"failed, no answer", store.Statements().FailedSQL, []any{tenant, endpoint, pos, attempt, nil, "refused", 30.0, 86400.0, 86400.0, 5, false}, nil},
		{"redeliver one", store.Statements().RedeliverSQL, []any{tenant, endpoint, int64(0), true, pos, true}, nil},
		{"recent deliveries", store.Statements().RecentDeliveriesSQL, []any{tenant, endpoint, 2}, nil},
		// Pages of one event each, looked up by position as every attempt's
		// lease looks up its event.
		{"fan out", store.Statements().FanOutSQL, []any{tenant, "whe_2"}, nil},
		{"feed read", store.Statements().FeedRead, []any{tenant, int64(2), 1, 1 << 20}, []any{tenant, int64(21999), 1, 1 << 20}},
	}
	for _, c := range cases {
		settlePlan(ctx, t, conn, c.name, c.sql, c.args)
	}
	tiny := make([]int, len(cases))
	for i, c := range cases {
		tiny[i] = buffersPerCall(ctx, t, conn, c.name, c.sql, c.args)
	}

	load("big", "whe_1", 4, 22000)
	load("big", "whe_2", 3, 200)
	load("small", "whe_1", 2, 200)
	run(`UPDATE webhook_endpoints SET feed_pos = 21999 WHERE tenant_id = 'big' AND id = 'whe_2'`)
	for i, c := range cases {
		if c.grown != nil {
			c.args = c.grown
		}
		got := buffersPerCall(ctx, t, conn, c.name, c.sql, c.args)
		limit := 2*tiny[i] + 8
		if got > limit {
			t.Errorf("%s: %d buffers per call with 20,000 deliveries owed, %d with a handful (at most %d)\n%s",
				c.name, got, tiny[i], limit, planText(ctx, t, conn, c.sql, c.args))
		} else {
			t.Logf("%s: %d buffers per call, %d with a handful", c.name, got, tiny[i])
		}
	}
}

// loadDeliveriesSQL records positions $3 to $4 of tenant $1's feed, an
// event each of a token of its own, and their deliveries to endpoint $2:
// one in eleven delivered, the others pending after a first attempt, every
// other one of them due now and the rest waiting out a backoff. The events
// and positions are endpoint whe_1's only (others share its positions).
const loadDeliveriesSQL = `
WITH e AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, to_state, generation)
    SELECT $1, format('tok_%s_%s', $2::text, n), 'ledger.credit', 'user-1', 'test', 'issued', 'issued', 0
    FROM generate_series($3::integer, $4::integer) AS n
    WHERE $2::text = 'whe_1'
    RETURNING token_id, seq
), p AS (
    INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
    SELECT $1, split_part(token_id, '_', 4)::bigint, token_id, seq, now() FROM e
)
INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state, attempts, next_attempt_at, finished_at)
SELECT $1, $2, n, 'evt_' || n,
       CASE WHEN n % 11 = 0 THEN 'delivered' ELSE 'pending' END, 1,
       CASE WHEN n % 2 = 0 THEN now() - interval '1 minute' ELSE now() + interval '1 hour' END,
       CASE WHEN n % 11 = 0 THEN now() END
FROM generate_series($3::integer, $4::integer) AS n`

// planText is the plan of sql's prepared statement on conn run with args,
// as EXPLAIN (ANALYZE, BUFFERS) prints it, for a failure's message.
func planText(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, args []any) string {
	t.Helper()
	lines, err := explainPrepared(ctx, t, conn, sql, args, "")
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "\n")
}
