package event_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestPositioningLeavesEventsInPlace: giving events their positions writes
// no new version of the events themselves (their ctid stays), so an event
// costs the spend that wrote it one row, not two (issue 18's outbox target).
func TestPositioningLeavesEventsInPlace(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	const n = 25
	for i := range n {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := write(ctx, tx, "t", "tok", i+1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	ctids := func() map[string]string {
		rows, _ := pool.Query(ctx, `SELECT event_id, ctid::text FROM token_events`)
		m, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv [2]string, err error) {
			return kv, r.Scan(&kv[0], &kv[1])
		})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kv := range m {
			out[kv[0]] = kv[1]
		}
		return out
	}
	before := ctids()
	if _, err := follow(ctx, pool, "t", n); err != nil {
		t.Fatal(err)
	}
	after := ctids()
	for id, ctid := range before {
		if after[id] != ctid {
			t.Fatalf("event %s moved from %s to %s when positioned: it was written again", id, ctid, after[id])
		}
	}
}
