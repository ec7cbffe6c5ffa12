package event_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// writeBodies writes one event per size, in order, each carrying an outcome
// body of that many bytes, and waits for them all to be positioned.
func writeBodies(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tenant string, sizes ...int) {
	t.Helper()
	for i, n := range sizes {
		body := `"` + strings.Repeat("x", n-2) + `"`
		if _, err := pool.Exec(ctx, `
			INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
			VALUES ($1, 'tok', 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', $2, 200, convert_to($3, 'UTF8'))`,
			tenant, i+1, body); err != nil {
			t.Fatal(err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, pgtest.SettleTimeout)
	defer cancel()
	if _, err := follow(wait, pool, tenant, len(sizes)); err != nil {
		t.Fatalf("%v; %s", err, pgtest.Unsettled(pool))
	}
}

// TestReadCutsPagesToTheirByteBudget: a page stops before the event that
// would take it past its byte budget, except the first, which comes however
// large, so a reader always moves on.
func TestReadCutsPagesToTheirByteBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const kib = 1 << 10
	// Positions 1-6: a body larger than the default budget, then four of
	// 300 KiB and a small one.
	writeBodies(ctx, t, pool, "t", event.MaxBytes+kib, 300*kib, 300*kib, 300*kib, 300*kib, 10)
	cases := []struct {
		after    int64
		maxBytes int
		want     []int64 // positions
	}{
		{0, 0, []int64{1}},            // alone past the budget, but it comes
		{1, 0, []int64{2, 3, 4}},      // a fourth would pass 1 MiB
		{1, 700 * kib, []int64{2, 3}}, // a client's smaller budget
		{1, 1, []int64{2}},            // the least budget still moves on
		{4, 0, []int64{5, 6}},         // the rest
		{5, 10 * kib, []int64{6}},     // a small event under a small budget
		{6, 0, nil},                   // the end
	}
	for _, c := range cases {
		page, err := event.Read(ctx, pool, "t", event.Query{After: c.after, MaxBytes: c.maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		total := 0
		for _, e := range page {
			got = append(got, e.Position)
			total += len(e.Outcome)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("after %d, budget %d: positions %v (%d body bytes), want %v", c.after, c.maxBytes, got, total, c.want)
		}
	}
}

// TestReadRefusesACursorAheadOfTheFeed: a cursor past the last position the
// feed handed out (from another database, say one restored from an older
// backup) is refused, not answered empty until other events fill the
// positions it would then skip.
func TestReadRefusesACursorAheadOfTheFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	writeBodies(ctx, t, pool, "t", 10, 10)
	for _, c := range []struct {
		tenant string
		after  int64
		ahead  bool
	}{{"t", 2, false}, {"t", 3, true}, {"other", 1, true}, {"other", 0, false}} {
		_, err := event.Read(ctx, pool, c.tenant, event.Query{After: c.after})
		var ahead *event.CursorAheadError
		switch {
		case c.ahead && (!errors.Is(err, event.ErrCursorAhead) || !errors.As(err, &ahead)):
			t.Errorf("%s after %d: %v, want ErrCursorAhead", c.tenant, c.after, err)
		case c.ahead && ahead.Head != map[string]int64{"t": 2, "other": 0}[c.tenant]:
			t.Errorf("%s after %d: head %d", c.tenant, c.after, ahead.Head)
		case !c.ahead && err != nil:
			t.Errorf("%s after %d: %v, want no error", c.tenant, c.after, err)
		}
	}
}
