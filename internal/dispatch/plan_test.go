package dispatch_test

import (
	"context"
	"testing"

	"github.com/tokend/tokend/internal/dispatch"
	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/internal/tokentest"
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
			{"fan out", dispatch.FanOutSQL, "", 1},               // one row: the counts
			{"claim", dispatch.ClaimSQL, "32, 30, 100, 100", 32}, // a batch of the 100 owed
		} {
			read, got := pgtest.Explain(t, pool, mode, c.sql, c.args)
			if got != c.handed {
				t.Errorf("%s, %s: answered %d rows, want %d", mode, c.name, got, c.handed)
			}
			if read > 4*behind+100 {
				t.Errorf("%s, %s: read %d rows for %d owed events", mode, c.name, read, behind)
			}
		}
	}
}
