package event_test

import (
	"context"
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

// TestFeedSkipsNoLateCommitAcrossTenants: writers on six tenants, some of
// their transactions writing events of two tenants at once (on Citus, of
// shards on two workers: a transaction committed in two phases) and one per
// tenant pair held open while the others commit, and a reader per tenant
// following its feed: every event is read exactly once, at consecutive
// positions, none skipped, and the feeds reach the end (no stall). On a
// Citus cluster (pgtest's TOKEND_TEST_CITUS_DIR) it checks that the tenants'
// shards sit on at least two workers.
func TestFeedSkipsNoLateCommitAcrossTenants(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	tenants := []string{"a", "b", "c", "d", "e", "f"}
	checkSpread(ctx, t, pool, tenants)
	const writers, perWriter = 6, 20

	var (
		mu  sync.Mutex
		ids = map[string]map[string]bool{}
	)
	for _, tn := range tenants {
		ids[tn] = map[string]bool{}
	}
	// writeIn writes one event of each tenant in tx and records them.
	writeIn := func(tx pgx.Tx, token string, gen int, in ...string) error {
		for _, tn := range in {
			id, err := write(ctx, tx, tn, token, gen)
			if err != nil {
				return err
			}
			mu.Lock()
			ids[tn][id] = true
			mu.Unlock()
		}
		return nil
	}
	// One open transaction per pair of tenants, written first, committed
	// last.
	var late []pgx.Tx
	for i := 0; i < len(tenants); i += 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := writeIn(tx, "tok_late", 1, tenants[i], tenants[i+1]); err != nil {
			t.Fatal(err)
		}
		late = append(late, tx)
	}

	type result struct {
		tenant string
		got    []event.Event
		err    error
	}
	var g errgroup.Group
	half := make(chan struct{})
	var halfOnce sync.Once
	for w := range writers {
		g.Go(func() error {
			for i := range perWriter {
				if i == perWriter/2 {
					halfOnce.Do(func() { close(half) })
				}
				// Writer w writes tenant w, and every third transaction
				// tenant w+1 too.
				in := []string{tenants[w%len(tenants)]}
				if i%3 == 0 {
					in = append(in, tenants[(w+1)%len(tenants)])
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return writeIn(tx, fmt.Sprintf("tok_%d", w), i+1, in...)
				}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	<-half
	// Readers pass over the late transactions' events while they are open.
	for _, tn := range tenants {
		if _, err := event.Read(ctx, pool, tn, event.Query{Limit: 50}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	for _, tx := range late {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	results := make(chan result, len(tenants))
	for _, tn := range tenants {
		go func() {
			got, err := follow(ctx, pool, tn, len(ids[tn]))
			results <- result{tn, got, err}
		}()
	}
	for range tenants {
		r := <-results
		if r.err != nil {
			t.Fatalf("tenant %s: %v", r.tenant, r.err)
		}
		for _, e := range r.got {
			if !ids[r.tenant][e.ID] {
				t.Fatalf("tenant %s: read event %s that it did not write, or twice", r.tenant, e.ID)
			}
			delete(ids[r.tenant], e.ID)
		}
		if len(ids[r.tenant]) != 0 {
			t.Fatalf("tenant %s: %d written events never read", r.tenant, len(ids[r.tenant]))
		}
		more, err := event.Read(ctx, pool, r.tenant, event.Query{After: int64(len(r.got))})
		if err != nil || len(more) != 0 {
			t.Fatalf("tenant %s past the end = %d events, %v; want none", r.tenant, len(more), err)
		}
	}
	checkNoRebase(ctx, t, pool)
}

// checkNoRebase fails if a feed was rebased (see event.CursorEpochError):
// on a live database, whose transaction ids are the ones the events carry,
// none ever is. Events numbered by another node's ids than the horizon
// they are judged by (on Citus, the coordinator's and a worker's) make the
// feed look restored.
func checkNoRebase(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var rebased []string
	rows, err := pool.Query(ctx, `SELECT tenant_id FROM event_feed_heads WHERE cardinality(prior_epochs) > 0 ORDER BY tenant_id`)
	if err == nil {
		rebased, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rebased) > 0 {
		t.Fatalf("the feeds of %v were rebased on a live database", rebased)
	}
}

// onCitus tells whether pool's database has the citus extension.
func onCitus(ctx context.Context, t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var citus bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&citus); err != nil {
		t.Fatal(err)
	}
	return citus
}

// checkSpread, on a Citus cluster, fails unless tenants' events are stored
// on at least two workers; on plain Postgres it does nothing.
func checkSpread(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tenants []string) {
	t.Helper()
	if !onCitus(ctx, t, pool) {
		return
	}
	var nodes int
	if err := pool.QueryRow(ctx, `
		SELECT count(DISTINCT s.nodeport) FROM unnest($1::text[]) AS t(id)
		JOIN citus_shards s ON s.table_name = 'token_events'::regclass
		 AND s.shardid = get_shard_id_for_distribution_column('token_events', t.id)`, tenants).Scan(&nodes); err != nil {
		t.Fatal(err)
	}
	if nodes < 2 {
		t.Fatalf("tenants %v are stored on %d node(s), want at least two workers", tenants, nodes)
	}
	t.Logf("tenants %v stored on %d workers", tenants, nodes)
}
