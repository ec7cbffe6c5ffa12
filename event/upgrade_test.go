package event_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
)

// TestUpgradeKeepsEveryPosition: a feed positioned by seq under 007 keeps
// its positions through 008, which moves them to event_positions, and every
// event still waiting is read once afterwards, including one that sorts
// below the new (xid, seq) cursor, which the cursor alone would pass by.
func TestUpgradeKeepsEveryPosition(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, url := pgtest.ConnAt(t, 7)
	// Each event in a transaction of its own, so their xids ascend.
	var ids []string
	for _, ev := range []struct{ tenant, token string }{{"a", "tok_1"}, {"a", "tok_2"}, {"a", "tok_3"}, {"b", "tok_4"}, {"b", "tok_5"}} {
		var id string
		if err := conn.QueryRow(ctx, `
			INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
			VALUES ($1, $2, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1)
			RETURNING event_id`, ev.tenant, ev.token).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Tenant a's second event was positioned first (its transaction had
	// settled before the first's, as 004 allowed); b never read its feed.
	if _, err := conn.Exec(ctx, `UPDATE token_events SET pos = 1 WHERE event_id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO event_feed_heads (tenant_id, pos) VALUES ('a', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Schema.Apply(ctx, conn); err != nil {
		t.Fatal(err)
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tc := range []struct {
		tenant string
		want   []string
	}{
		{"a", []string{ids[1], ids[0], ids[2]}},
		{"b", []string{ids[3], ids[4]}},
	} {
		page, err := follow(ctx, pool, tc.tenant, len(tc.want))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i, e := range page {
			if e.Position != int64(i+1) {
				t.Fatalf("tenant %s: event %d at position %d", tc.tenant, i+1, e.Position)
			}
			got = append(got, e.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("tenant %s: feed %v, want %v", tc.tenant, got, tc.want)
		}
	}
	var positions int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_positions`).Scan(&positions); err != nil {
		t.Fatal(err)
	}
	if positions != len(ids) {
		t.Fatalf("%d positions for %d events", positions, len(ids))
	}
}
