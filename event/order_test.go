package event_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// insertToken inserts an issued lease token id of tenant, as the tests
// here need one.
func insertToken(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, tenant, id string) error {
	_, err := q.Exec(ctx, `
		INSERT INTO tokens (tenant_id, id, operation, intent_id, subject, secret_hash, secret_nonce, secret_key_id,
		                    fingerprint, ttl_seconds, retention_seconds, state, expires_at, retain_until, mode)
		VALUES ($1, $2, 'pay', 'i1', 'alice', '\x01', '\x01', 'k', '\x01', 3600, 3600, 'issued',
		        now() + interval '1 hour', now() + interval '2 hours', 'lease')`, tenant, id)
	return err
}

// tableScans answers the sequential scans of table that this backend
// counted, and its index scans too when withIndex, flushed or not
// (pg_stat_xact_ counts some of the session's earlier transactions too
// until it flushes them): take differences within one transaction.
func tableScans(ctx context.Context, t *testing.T, tx pgx.Tx, table string, withIndex bool) (n int64) {
	t.Helper()
	if err := tx.QueryRow(ctx, `
		SELECT seq_scan + CASE WHEN $2 THEN coalesce(idx_scan, 0) ELSE 0 END
		FROM pg_stat_xact_user_tables WHERE relname = $1`, table, withIndex).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A writer is how a release records a token's event, read from the
// token's row: this one gives the event's xid as the token's event_xid
// (migration 022, store's recordSQL); the previous one gives none, and the
// table's trigger reads the token's last event instead (migration 020).
type writer struct {
	name   string
	record string
}

var writers = []writer{
	{"this release", `
		INSERT INTO token_events (xid, tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		SELECT event_xid, tenant_id, id, operation, subject, 'test', 'lease', 'issued', 'pending', generation
		FROM tokens WHERE tenant_id = $1 AND id = $2
		RETURNING event_id`},
	{"previous release", `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		SELECT tenant_id, id, operation, subject, 'test', 'lease', 'issued', 'pending', generation
		FROM tokens WHERE tenant_id = $1 AND id = $2
		RETURNING event_id`},
}

// change moves token id of tenant to generation in tx as a transition does
// (store.Step): it locks and updates the token's row, then records the
// event read from that row as w does. It answers the event's id.
func (w writer) change(ctx context.Context, tx pgx.Tx, tenant, id string, generation int) (string, error) {
	if _, err := tx.Exec(ctx, `UPDATE tokens SET generation = $3 WHERE tenant_id = $1 AND id = $2`,
		tenant, id, generation); err != nil {
		return "", err
	}
	var eventID string
	err := tx.QueryRow(ctx, w.record, tenant, id).Scan(&eventID)
	return eventID, err
}

// xid answers tx's transaction id, taking one if it has none yet.
func xid(ctx context.Context, t *testing.T, tx pgx.Tx) string {
	t.Helper()
	var x string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&x); err != nil {
		t.Fatal(err)
	}
	return x
}

// waitLocked returns once the backend of tx waits for a lock.
func waitLocked(ctx context.Context, t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`,
			pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the waiting transaction never waited for the token's lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestFeedKeepsATokensCommitOrder: a transaction W that took its
// transaction id first, then waited for a token's row lock while R, with a
// newer id, changed the token and committed, has its change after R's in
// the feed, as the row lock ordered them (defect 1 of docs/robustness.md:
// the feed ordered them by transaction id, W's first). A transaction C
// whose id lies between W's and R's is still open when the feed is first
// positioned, so W's event is settled by its own id before R's is: the
// feed must hold it back rather than hand it the earlier position. R and W
// write as this release or the previous one does, in every pairing: both
// run side by side during a rolling upgrade.
func TestFeedKeepsATokensCommitOrder(t *testing.T) {
	if pgtest.Citus() {
		t.Skip("on Citus the ids and the row lock are the worker's: the coordinator sees neither W's id nor its wait; TestEventTakesItsTokensLaterXid checks the trigger on a table named as a shard")
	}
	t.Parallel()
	for _, r := range writers {
		for _, w := range writers {
			t.Run("R "+r.name+", W "+w.name, func(t *testing.T) {
				t.Parallel()
				keepsCommitOrder(t, r, w, false)
			})
		}
	}
	// A token from before migration 022 has no event_xid: this release's
	// writer gives no xid for it, and the trigger reads its last event.
	t.Run("token from before 022", func(t *testing.T) {
		t.Parallel()
		keepsCommitOrder(t, writers[0], writers[0], true)
	})
}

func keepsCommitOrder(t *testing.T, rw, ww writer, legacy bool) {
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.SettleTimeout)
	defer cancel()
	pool := pgtest.NewPool(t)
	const tenant, id = "t", "tok_a"

	// The token and its issue event.
	var issued string
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := insertToken(ctx, tx, tenant, id); err != nil {
			return err
		}
		var err error
		if issued, err = write(ctx, tx, tenant, id, 0); err != nil || !legacy {
			return err
		}
		// The trigger would set it again.
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE tokens SET event_xid = NULL WHERE tenant_id = $1 AND id = $2`, tenant, id)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	begin := func() pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return tx
	}
	// W takes its id first: an UPDATE that waits for a row lock has taken
	// its id before it waits. C takes the next, R a later one.
	w, c, r := begin(), begin(), begin()
	xw, xc := xid(ctx, t, w), xid(ctx, t, c)
	rID, err := rw.change(ctx, r, tenant, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ids: W %s, C %s, R %s", xw, xc, xid(ctx, t, r))

	wPID := w.Conn().PgConn().PID()
	wDone := make(chan error, 1)
	var wID string
	go func() {
		var err error
		if wID, err = ww.change(ctx, w, tenant, id, 2); err == nil {
			err = w.Commit(ctx)
		}
		wDone <- err
	}()
	waitLocked(ctx, t, pool, wPID)
	if err := r.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-wDone; err != nil {
		t.Fatal(err)
	}

	// W and R have committed, C is open: position what has settled. Only
	// the issue may be served (the others wait for C), and nothing out of
	// order; the final read below sees whatever was positioned here.
	if _, err := event.Read(ctx, pool, tenant, event.Query{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	got, err := follow(ctx, pool, tenant, 3)
	if err != nil {
		t.Fatalf("%v; %s", err, pgtest.Unsettled(pool))
	}
	want := []string{issued, rID, wID}
	for i, e := range got {
		if e.ID != want[i] || e.Generation != int64(i) {
			t.Fatalf("feed = %s; want the issue, R's change (generation 1), then W's (generation 2)", feedString(got))
		}
	}
}

// feedString shows events as position:generation.
func feedString(events []event.Event) string {
	var s string
	for _, e := range events {
		s += fmt.Sprintf(" %d:gen%d", e.Position, e.Generation)
	}
	return s
}

// TestEventTakesItsTokensLaterXid: an event written by a transaction whose
// id is older than that of the token's event before it carries the later
// xid, both in token_events and in a table named as a Citus shard is (the
// trigger reads the table it fires on: on Citus, the shard), and keeps its
// own id when that is the later one.
func TestEventTakesItsTokensLaterXid(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("on Citus a transaction's id here is the coordinator's, not that of the worker storing its events; the table named as a shard stands for the worker")
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Vacuumed while empty, as a new database's table is: a plan made now
	// that scanned the table would be kept (see the scan count below).
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE token_events`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE token_events_102008 (LIKE token_events INCLUDING ALL);
		CREATE TRIGGER token_events_xid BEFORE INSERT ON token_events_102008
			FOR EACH ROW EXECUTE FUNCTION token_events_xid()`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"token_events", "token_events_102008"} {
		t.Run(table, func(t *testing.T) {
			insert := func(tx pgx.Tx, id string) (x string) {
				if err := tx.QueryRow(ctx, `
					INSERT INTO `+table+` (tenant_id, token_id, actor, kind, to_state, generation)
					VALUES ('t', $1, 'test', 'spend', 'consumed', 1)
					RETURNING xid::text`, id).Scan(&x); err != nil {
					t.Fatal(err)
				}
				return x
			}
			scans := func(tx pgx.Tx) int64 { return tableScans(ctx, t, tx, table, false) }
			old, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Rollback(ctx)
			own := xid(ctx, t, old)
			scanned := scans(old)
			var newer, other string
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				newer = insert(tx, "tok_a")
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got := insert(old, "tok_a"); got != newer {
				t.Errorf("event after one of xid %s, by transaction %s: xid %s, want %s", newer, own, got, newer)
			}
			if other = insert(old, "tok_b"); other != own {
				t.Errorf("first event of a token, by transaction %s: xid %s, want its own", own, other)
			}
			// The read of the token's last event is a probe of the primary
			// key, not a scan of the table, however many the session sent.
			for range 8 {
				insert(old, "tok_a")
			}
			if n := scans(old) - scanned; n != 0 {
				t.Errorf("%d sequential scans of %s for 10 events", n, table)
			}
		})
	}
}

// TestEventTakesItsXidFromTheTokensRow: this release's writer gives an
// event the token's event_xid, and the trigger then reads nothing of
// token_events (migration 022: the read was a quarter of Postgres' CPU per
// spend); the previous release's writer still has it read, once an event.
// The xid is the later of the writer's id and the token's last event's,
// either way.
func TestEventTakesItsXidFromTheTokensRow(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("on Citus a transaction's id here is the coordinator's, not that of the worker storing its events")
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const tenant, id = "t", "tok_a"
	if err := insertToken(ctx, pool, tenant, id); err != nil {
		t.Fatal(err)
	}
	scans := func(tx pgx.Tx) int64 { return tableScans(ctx, t, tx, "token_events", true) }
	for i, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			// old takes its id first; a newer transaction then changes the
			// token and commits, as in TestFeedKeepsATokensCommitOrder.
			old, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Rollback(ctx)
			own := xid(ctx, t, old)
			var newer string
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := w.change(ctx, tx, tenant, id, 2*i+1); err != nil {
					return err
				}
				newer = xid(ctx, t, tx)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			before := scans(old)
			const events = 5
			for g := range events {
				eventID, err := w.change(ctx, old, tenant, id, 2*i+2+g)
				if err != nil {
					t.Fatal(err)
				}
				var got string
				if err := old.QueryRow(ctx, `SELECT xid::text FROM token_events WHERE event_id = $1`, eventID).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if got != newer {
					t.Errorf("event %d by transaction %s after one of xid %s: xid %s, want %s", g, own, newer, got, newer)
				}
			}
			// The reads of the events' xids above scan token_events too,
			// once each.
			n := scans(old) - before - events
			switch {
			case w.name == "this release" && n != 0:
				t.Errorf("%d scans of token_events by the trigger for %d events, want none", n, events)
			case w.name != "this release" && n < events:
				t.Errorf("%d scans of token_events by the trigger for %d events, want one each", n, events)
			}
		})
	}
}
