package event_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// TestFeedStatementsWalkOnlyWhatTheyNeed: on a one-tenant trail of 20,000
// positioned events (statistics then say every row is the tenant's), each
// of the feed's statements reads about as many rows as it answers, under
// custom plans and under the generic plans prepared statements may settle
// on: checking for news, positioning nothing new, and reading the last page.
func TestFeedStatementsWalkOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if onCitus(ctx, t, pool) {
		t.Skip("on Citus a statement's plan is a custom scan whose rows the worker reads; the plans checked here are one Postgres's")
	}
	const n = 20000
	tokentest.Trail(t, pool, "t", n)
	var xid string
	var seq int64
	if err := pool.QueryRow(ctx, `SELECT xid::text, seq FROM event_feed_heads WHERE tenant_id = 't'`).Scan(&xid, &seq); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, sql, args string
		rows            int // answered
	}{
		{"horizon", event.HorizonSQL, "'t'", 1},
		{"position", event.PositionSQL, "'t', 20000, '" + xid + "', " + itoa(seq) + ", 1000, pg_snapshot_xmin(pg_current_snapshot())::text", 0},
		{"read", event.ReadSQL, "'t', 19900, 100, " + itoa(event.MaxBytes), 100},
	}
	for _, mode := range pgtest.PlanModes {
		for _, c := range cases {
			read, got := pgtest.Explain(t, pool, mode, c.sql, c.args)
			if got != c.rows {
				t.Errorf("%s, %s: answered %d rows, want %d", mode, c.name, got, c.rows)
			}
			if read > 4*c.rows+20 {
				t.Errorf("%s, %s: read %d rows to answer %d", mode, c.name, read, got)
			}
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
