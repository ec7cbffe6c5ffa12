package event_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// write inserts one event for token id of tenant in tx, as a state change
// would, and answers its event id.
func write(ctx context.Context, tx pgx.Tx, tenant, id string, generation int) (string, error) {
	var eventID string
	err := tx.QueryRow(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		VALUES ($1, $2, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', $3)
		RETURNING event_id`, tenant, id, generation).Scan(&eventID)
	return eventID, err
}

// follow reads tenant's feed from the start until it has want events or
// ctx ends, checking each page as it comes: positions consecutive from 1 and
// no event twice.
func follow(ctx context.Context, pool *pgxpool.Pool, tenant string, want int) ([]event.Event, error) {
	var got []event.Event
	seen := map[string]bool{}
	var after int64
	for len(got) < want {
		page, err := event.Read(ctx, pool, tenant, event.Query{After: after, Limit: 7})
		if err != nil {
			return got, err
		}
		for _, e := range page {
			if e.Position != after+1 {
				return got, fmt.Errorf("after %d came position %d: a gap", after, e.Position)
			}
			if seen[e.ID] {
				return got, fmt.Errorf("event %s at position %d seen twice", e.ID, e.Position)
			}
			seen[e.ID] = true
			got = append(got, e)
			after = e.Position
		}
		if len(page) == 0 {
			select {
			case <-ctx.Done():
				return got, fmt.Errorf("%d of %d events: %w", len(got), want, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return got, nil
}

// TestFeedSkipsNoLateCommit: a transaction that wrote its event first but
// commits last, while 8 writers commit around it and a reader follows the
// feed, still has its event read, once, and every event is read once, with
// consecutive positions. A feed by write sequence would skip the late one.
func TestFeedSkipsNoLateCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	const tenant, writers, perWriter = "t", 8, 40

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)
	lateID, err := write(ctx, late, tenant, "tok_late", 1)
	if err != nil {
		t.Fatal(err)
	}

	const total = writers*perWriter + 1
	var (
		mu  sync.Mutex
		ids = map[string]bool{lateID: true}
	)
	readDone := make(chan error, 1)
	var got []event.Event
	go func() {
		var err error
		got, err = follow(ctx, pool, tenant, total)
		readDone <- err
	}()

	var g errgroup.Group
	half := make(chan struct{})
	var halfOnce sync.Once
	for w := range writers {
		g.Go(func() error {
			for i := range perWriter {
				if i == perWriter/2 {
					halfOnce.Do(func() { close(half) })
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					id, err := write(ctx, tx, tenant, fmt.Sprintf("tok_%d", w), i+1)
					mu.Lock()
					ids[id] = true
					mu.Unlock()
					return err
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	<-half
	// Other transactions commit after the late one wrote; give the reader
	// time to pass over the late event's sequence number before it commits.
	if _, err := follow(ctx, pool, tenant, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-readDone; err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("read %d events, want %d", len(got), total)
	}
	last := map[string]int64{}
	for _, e := range got {
		if !ids[e.ID] {
			t.Fatalf("read event %s that no writer wrote", e.ID)
		}
		delete(ids, e.ID)
		// One token's events come in the order they were written.
		if e.Generation <= last[e.TokenID] {
			t.Fatalf("token %s: generation %d after %d", e.TokenID, e.Generation, last[e.TokenID])
		}
		last[e.TokenID] = e.Generation
	}
	if len(ids) != 0 {
		t.Fatalf("%d written events never read", len(ids))
	}
	// Nothing more, and a read past the end answers nothing.
	more, err := event.Read(ctx, pool, tenant, event.Query{After: int64(total), Limit: 10})
	if err != nil || len(more) != 0 {
		t.Fatalf("read past the end = %d events, %v; want none", len(more), err)
	}
	checkNoRebase(ctx, t, pool)
}

// TestFeedWaitsForOpenTransactions: while a transaction that wrote an event
// is open, events committed after it are held back, not handed positions
// that the open one's event would then have to come after.
func TestFeedWaitsForOpenTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const tenant = "t"

	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	openID, err := write(ctx, open, tenant, "tok_open", 1)
	if err != nil {
		t.Fatal(err)
	}
	var laterID string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		laterID, err = write(ctx, tx, tenant, "tok_later", 1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	page, err := event.Read(ctx, pool, tenant, event.Query{After: 0, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 0 {
		t.Fatalf("with an older transaction open, the feed gave %d events, want 0", len(page))
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Transactions of other tests, in other databases of the same server,
	// hold the horizon back too: wait for it to pass.
	wait, cancel := context.WithTimeout(ctx, pgtest.SettleTimeout)
	defer cancel()
	page, err = follow(wait, pool, tenant, 2)
	if err != nil {
		t.Fatalf("%v; %s", err, pgtest.Unsettled(pool))
	}
	if len(page) != 2 || page[0].ID != openID || page[1].ID != laterID || page[0].Position != 1 || page[1].Position != 2 {
		t.Fatalf("feed = %+v, want %s at 1 then %s at 2", page, openID, laterID)
	}
}

// TestFeedTenantIsolation: a tenant reads its own events only, and its
// positions do not count another's.
func TestFeedTenantIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	for _, tenant := range []string{"a", "b", "a"} {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := write(ctx, tx, tenant, "tok_"+tenant+time.Now().String(), 1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	wait, cancel := context.WithTimeout(ctx, pgtest.SettleTimeout)
	defer cancel()
	a, err := follow(wait, pool, "a", 2)
	if err != nil {
		t.Fatalf("%v; %s", err, pgtest.Unsettled(pool))
	}
	b, err := follow(wait, pool, "b", 1)
	if err != nil {
		t.Fatal(err)
	}
	if more, err := event.Read(ctx, pool, "b", event.Query{After: 1, Limit: 10}); err != nil || len(more) != 0 {
		t.Fatalf("tenant b past its one event = %d events, %v; want none", len(more), err)
	}
	if len(a) != 2 || len(b) != 1 || a[1].Position != 2 || b[0].Position != 1 {
		t.Fatalf("tenant a read %d, b read %d events (positions %+v, %+v); want 2 at 1-2 and 1 at 1", len(a), len(b), a, b)
	}
}

func TestReadRefusesBadRequests(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for _, q := range []event.Query{
		{After: -1, Limit: 10}, {Limit: -1}, {Limit: event.MaxLimit + 1},
		{MaxBytes: -1}, {MaxBytes: event.MaxBytes + 1},
	} {
		if _, err := event.Read(context.Background(), pool, "t", q); !errors.Is(err, event.ErrInvalidRequest) {
			t.Errorf("Read(%+v) = %v, want ErrInvalidRequest", q, err)
		}
	}
}
