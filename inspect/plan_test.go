package inspect_test

import (
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// TestListWalksOnlyItsState: a list filtered by a rare state reads about as
// many rows as it returns, under custom plans and under generic ones (a
// prepared statement's, forced here with plan_cache_mode), instead of
// walking the tenant's other tokens. 20,000 consumed tokens surround five
// of each rare state; a walk past them would read thousands of rows.
func TestListWalksOnlyItsState(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	seedStates(t, pool, 20000)
	cases := []struct {
		state string
		want  int // tokens listed
	}{
		{"unknown", 5}, {"revoked", 5}, {"issued", 5}, {"expired", 10}, // 5 stored, 5 issued past expiry
		{"consumed", 51}, // a full page: the walk stops there
	}
	for _, mode := range pgtest.PlanModes {
		for _, c := range cases {
			f := inspect.Filter{State: token.State(c.state)}
			read, listed := explainList(t, pool, mode, f)
			if listed != c.want {
				t.Errorf("%s, state %s: listed %d tokens, want %d", mode, c.state, listed, c.want)
			}
			if read > 4*c.want+20 {
				t.Errorf("%s, state %s: read %d rows to list %d", mode, c.state, read, listed)
			}
		}
	}
}

// explainList runs f's list statement (a page of 50 and one more) as a
// prepared statement under plan_cache_mode mode, and returns how many rows
// its scans read (returned or filtered out) and how many it returned.
func explainList(t *testing.T, pool *pgxpool.Pool, mode string, f inspect.Filter) (read, listed int) {
	t.Helper()
	state := "NULL"
	if f.State != "" {
		state = "'" + string(f.State) + "'"
	}
	return pgtest.Explain(t, pool, mode, inspect.ListStatement(f), fmt.Sprintf("'big', %s, NULL, NULL, NULL, NULL, NULL, 51, NULL", state))
}

// seedStates gives tenant "big" n tokens: five of each rare kind of state
// (unknown, revoked, stored expired, issued past expiry, issued) and the
// rest consumed, then analyzes the table.
func seedStates(tb testing.TB, pool *pgxpool.Pool, n int) {
	tb.Helper()
	_, err := pool.Exec(context.Background(), `
INSERT INTO tokens (tenant_id, id, operation, intent_id, subject, secret_hash, secret_nonce, secret_key_id,
                    fingerprint, ttl_seconds, retention_seconds, state, expires_at, retain_until,
                    finished_at, result_status, result_body)
SELECT 'big', 'tok_' || lpad(to_hex(n), 26, '0'), 'ledger.credit', 'intent-' || n, 'user',
       sha256(int8send(n)), '\x00', 'k1', sha256(int8send(n)), 3600, 86400, k.state,
       now() + CASE WHEN k.past THEN interval '-1 minute' ELSE interval '1 hour' END,
       now() + interval '1 day',
       CASE WHEN k.state = 'issued' THEN NULL ELSE now() END,
       CASE WHEN k.state = 'consumed' THEN 200 END,
       CASE WHEN k.state = 'consumed' THEN '{}'::bytea END
FROM generate_series(1, $1::int) AS g(n),
     LATERAL (SELECT (ARRAY['consumed', 'unknown', 'revoked', 'expired', 'issued', 'issued'])[CASE WHEN n % 499 = 0 AND n / 499 <= 25 THEN 2 + (n / 499) % 5 ELSE 1 END] AS state,
                     n % 499 = 0 AND n / 499 <= 25 AND (n / 499) % 5 = 3 AS past) AS k`, n)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `VACUUM ANALYZE tokens`); err != nil {
		tb.Fatal(err)
	}
}
