package inspect_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// An issued token past its expiry, by the database clock, reads as expired
// through every read of this package, before the sweeper records it and
// after, and the record reads the same both times.
func TestExpiredIsAState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	late := e.issue(t, "acme", ledger.Credit, "alice", "").Token.ID
	live := e.issue(t, "acme", ledger.Credit, "alice", "").Token.ID
	// Past expiry by the database's now(); the process clock plays no part.
	if _, err := e.pool.Exec(ctx, `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}

	lists := []struct {
		name string
		f    inspect.Filter
		want []string
	}{
		{"state expired", inspect.Filter{State: token.Expired}, []string{late}},
		{"state issued", inspect.Filter{State: token.Issued}, []string{live}},
		{"state expired, subject", inspect.Filter{State: token.Expired, Subject: "alice"}, []string{late}},
		{"state issued, operation", inspect.Filter{State: token.Issued, Operation: ledger.Credit}, []string{live}},
		{"state consumed", inspect.Filter{State: token.Consumed}, nil},
	}
	check := func(when string) token.Record {
		t.Helper()
		got, err := inspect.Get(ctx, e.pool, "acme", late)
		if err != nil {
			t.Fatalf("%s: Get: %v", when, err)
		}
		if got.State != token.Expired || got.FinishedAt == nil || !got.FinishedAt.Equal(got.ExpiresAt) {
			t.Errorf("%s: Get = state %s, finished %v; want expired, finished at its expiry %v", when, got.State, got.FinishedAt, got.ExpiresAt)
		}
		if r, err := inspect.Get(ctx, e.pool, "acme", live); err != nil || r.State != token.Issued || r.FinishedAt != nil {
			t.Errorf("%s: Get(live) = %s, finished %v, %v; want issued, unfinished", when, r.State, r.FinishedAt, err)
		}
		for _, tt := range lists {
			items, _, err := inspect.List(ctx, e.pool, "acme", tt.f)
			if err != nil {
				t.Fatalf("%s: %s: List: %v", when, tt.name, err)
			}
			var ids []string
			for _, r := range items {
				ids = append(ids, r.ID)
				if r.ID == late && r.State != token.Expired {
					t.Errorf("%s: %s: listed as %s", when, tt.name, r.State)
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("%s: %s: List = %v, want %v", when, tt.name, ids, tt.want)
			}
		}
		return got
	}

	before := check("before the sweep")
	if _, err := admin.Purge(ctx, e.pool, admin.PurgeOptions{}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := e.pool.QueryRow(ctx, `SELECT state FROM tokens WHERE id = $1`, late).Scan(&stored); err != nil || stored != "expired" {
		t.Fatalf("after the sweep the row is %q, %v; want it recorded expired", stored, err)
	}
	after := check("after the sweep")
	if before.State != after.State || !before.FinishedAt.Equal(*after.FinishedAt) || before.Generation != after.Generation {
		t.Errorf("the record changed with the sweep: %+v, then %+v", before, after)
	}
}

// A read that finds a token past its expiry while a spend that judged it
// unexpired has yet to commit waits for that spend and answers what it left
// (consumed), and a spend that judged it unexpired before a read answered
// expired is refused: every read of expired holds for good (docs/robustness.md,
// track record #2).
func TestReadOfExpiredWaitsForTheSpendInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	payload := `{"account":"a","amount":5}`
	// judged begins a transaction, fixes its now() and moves the token's
	// expiry to just after it, by another connection.
	judged := func(t *testing.T, id string) pgx.Tx {
		t.Helper()
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		var began time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&began); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE tokens SET expires_at = $2 WHERE id = $1`, id, began.Add(time.Microsecond)); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	spend := func(tx pgx.Tx, iss intent.Issued) (consume.Response, error) {
		// Each case has its subject, so that its lists show its token alone.
		return e.spender.SpendTx(ctx, tx, consume.Request{Tenant: "acme", Secret: iss.Secret, Operation: ledger.Credit,
			Subject: iss.Token.Subject, Payload: []byte(payload)})
	}

	reads := []struct {
		name string
		read func(r token.Record) (token.Record, error)
	}{
		{"get", func(r token.Record) (token.Record, error) { return inspect.Get(ctx, e.pool, "acme", r.ID) }},
		{"list", func(r token.Record) (token.Record, error) {
			items, _, err := inspect.List(ctx, e.pool, "acme", inspect.Filter{Search: r.Subject})
			for _, it := range items {
				if it.ID == r.ID {
					return it, err
				}
			}
			return token.Record{}, errors.Join(err, token.ErrNotFound)
		}},
		{"list expired", func(r token.Record) (token.Record, error) {
			items, _, err := inspect.List(ctx, e.pool, "acme", inspect.Filter{State: token.Expired, Search: r.Subject})
			for _, it := range items {
				if it.ID == r.ID {
					return it, err
				}
			}
			return token.Record{}, errors.Join(err, token.ErrNotFound)
		}},
	}
	for _, rd := range reads {
		t.Run(rd.name+" during the spend", func(t *testing.T) {
			t.Parallel()
			iss := e.issue(t, "acme", ledger.Credit, t.Name(), payload)
			// The spend judges the token when it holds it, by the clock
			// then: it must come before the expiry, and the read after.
			var clock time.Time
			if err := e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&clock); err != nil {
				t.Fatal(err)
			}
			expiry := clock.Add(1500 * time.Millisecond)
			if _, err := e.pool.Exec(ctx, `UPDATE tokens SET expires_at = $2 WHERE id = $1`, iss.Token.ID, expiry); err != nil {
				t.Fatal(err)
			}
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			if _, err := spend(tx, iss); err != nil {
				t.Fatalf("spend: %v", err)
			}
			waitForClock(t, e, expiry)
			got := make(chan answer, 1)
			go func() {
				r, err := rd.read(iss.Token)
				got <- answer{r, err}
			}()
			if a, answered := waitForLockWaiter(t, e, got); answered {
				t.Fatalf("the read answered %s, %v before the spend committed", a.rec.State, a.err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			want := token.Consumed
			if rd.name == "list expired" {
				// The list of expired tokens no longer has it.
				if !errors.Is(a.err, token.ErrNotFound) {
					t.Errorf("the read answered %s, %v; want the token left out", a.rec.State, a.err)
				}
			} else if a.err != nil || a.rec.State != want {
				t.Errorf("the read answered %s, %v; want %s", a.rec.State, a.err, want)
			}
			if n := countEvents(t, e, iss.Token.ID, "expire"); n != 0 {
				t.Errorf("%d expire events for a consumed token", n)
			}
		})
		t.Run(rd.name+" before the spend", func(t *testing.T) {
			t.Parallel()
			iss := e.issue(t, "acme", ledger.Credit, t.Name(), payload)
			tx := judged(t, iss.Token.ID)
			r, err := rd.read(iss.Token)
			if err != nil || r.State != token.Expired {
				t.Fatalf("the read answered %s, %v; want expired", r.State, err)
			}
			if _, err := spend(tx, iss); !errors.Is(err, token.ErrExpired) {
				t.Errorf("the spend after the read answered expired: %v, want token.ErrExpired", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var state string
			if err := e.pool.QueryRow(ctx, `SELECT state FROM tokens WHERE id = $1`, iss.Token.ID).Scan(&state); err != nil || state != "expired" {
				t.Errorf("the row is %q, %v; want it recorded expired", state, err)
			}
			if n := countEvents(t, e, iss.Token.ID, "expire"); n != 1 {
				t.Errorf("%d expire events, want 1", n)
			}
		})
	}
}

// waitForLockWaiter returns once a statement on e's database waits for a
// lock, or with the answer when the read answers first.
func waitForLockWaiter(t *testing.T, e *env, answered <-chan answer) (answer, bool) {
	t.Helper()
	for {
		var waiting bool
		if err := e.pool.QueryRow(t.Context(), pgtest.LockWaitsSQL).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return answer{}, false
		}
		select {
		case a := <-answered:
			return a, true
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitForClock returns once the database's clock is past at.
func waitForClock(t *testing.T, e *env, at time.Time) {
	t.Helper()
	for {
		var past bool
		if err := e.pool.QueryRow(t.Context(), `SELECT clock_timestamp() > $1`, at).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type answer struct {
	rec token.Record
	err error
}

func countEvents(t *testing.T, e *env, id, kind string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM token_events WHERE token_id = $1 AND kind = $2`, id, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A spend or revoke whose transaction began before the token's expiry, and
// that waits for the token behind a spend refusing it as expired, judges
// the expiry by the clock once it holds the token: it is refused too. Judged
// by its transaction's now(), it spent or revoked the token after another
// spend had answered that it was expired.
func TestWritersJudgeExpiryOnceTheyHoldTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	payload := `{"account":"a","amount":5}`
	writers := []struct {
		name  string
		write func(tx pgx.Tx, iss intent.Issued) error
	}{
		{"spend", func(tx pgx.Tx, iss intent.Issued) error {
			_, err := e.spender.SpendTx(ctx, tx, consume.Request{Tenant: "acme", Secret: iss.Secret, Operation: ledger.Credit,
				Subject: "alice", Payload: []byte(payload)})
			return err
		}},
		{"revoke", func(tx pgx.Tx, iss intent.Issued) error {
			_, err := admin.RevokeTx(ctx, tx, "acme", iss.Token.ID, admin.Revocation{Reason: "test", Actor: "key_ops"})
			return err
		}},
	}
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			iss := e.issue(t, "acme", ledger.Credit, "alice", payload)
			late, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer late.Rollback(context.WithoutCancel(ctx))
			var began time.Time
			if err := late.QueryRow(ctx, `SELECT now()`).Scan(&began); err != nil {
				t.Fatal(err)
			}
			if _, err := e.pool.Exec(ctx, `UPDATE tokens SET expires_at = $2 WHERE id = $1`, iss.Token.ID, began.Add(time.Microsecond)); err != nil {
				t.Fatal(err)
			}
			first, err := e.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback(context.WithoutCancel(ctx))
			if _, err := e.spender.SpendTx(ctx, first, consume.Request{Tenant: "acme", Secret: iss.Secret, Operation: ledger.Credit,
				Subject: "alice", Payload: []byte(payload)}); !errors.Is(err, token.ErrExpired) {
				t.Fatalf("the first spend: %v, want token.ErrExpired", err)
			}
			got := make(chan answer, 1)
			go func() { got <- answer{err: w.write(late, iss)} }()
			if a, answered := waitForLockWaiter(t, e, got); answered {
				t.Fatalf("the %s answered %v without waiting for the first spend", w.name, a.err)
			}
			if err := first.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			if !errors.Is(a.err, token.ErrExpired) && !errors.Is(a.err, token.ErrInvalidState) {
				t.Errorf("the %s after a spend refused the token as expired: %v, want it refused as expired", w.name, a.err)
			}
			if err := late.Commit(ctx); err != nil && a.err == nil {
				t.Fatal(err)
			}
			var state string
			if err := e.pool.QueryRow(ctx, `SELECT state FROM tokens WHERE id = $1`, iss.Token.ID).Scan(&state); err != nil || state != "issued" {
				t.Errorf("the row is %q, %v; want it issued, its expiry not yet recorded", state, err)
			}
		})
	}
}
