package tokentest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
)

// Trail gives tenant n events, one per token tok_1 … tok_n, all of them
// positioned in the feed, and analyzes the tables, as the plan tests and
// benchmarks of the feed start from.
func Trail(tb testing.TB, pool *pgxpool.Pool, tenant string, n int) {
	tb.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		SELECT $1, 'tok_' || g, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1
		FROM generate_series(1, $2::int) g`, tenant, n); err != nil {
		tb.Fatal(err)
	}
	// An event waits for its position while any older transaction on the
	// server is open, another test's among them.
	deadline := time.Now().Add(time.Minute)
	for positioned := int64(0); positioned < int64(n); {
		k, err := event.Position(ctx, pool, tenant)
		if err != nil {
			tb.Fatal(err)
		}
		if k == 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("%d of %d events positioned after a minute", positioned, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		positioned += k
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE token_events, event_positions, event_feed_heads`); err != nil {
		tb.Fatal(err)
	}
}
