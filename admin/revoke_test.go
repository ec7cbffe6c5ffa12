package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

func TestRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Issued)

	rec, err := Revoke(ctx, e.pool, tenant, is.Token.ID, Revocation{Reason: "card reported stolen", Actor: "key_ops"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != token.Revoked || rec.ID != is.Token.ID || rec.Tenant != tenant || rec.FinishedAt == nil {
		t.Errorf("Revoke = %+v; want the revoked token with its finish time", rec)
	}
	if got := e.record(tenant, is.Token.ID); got.State != token.Revoked || !got.RetainUntil.Equal(rec.RetainUntil) {
		t.Errorf("stored %s until %v; want revoked until %v", got.State, got.RetainUntil, rec.RetainUntil)
	}
	// The intent is remembered for the retention period from the revoke,
	// or longer if the issue already promised longer.
	const retained = `SELECT count(*) FROM tokens WHERE id = $1
		AND retain_until = greatest($2::timestamptz, finished_at + make_interval(secs => retention_seconds))`
	if n := e.count(retained, is.Token.ID, is.Token.RetainUntil); n != 1 {
		t.Error("retain_until is not the later of the issue's and the revoke time plus the retention")
	}
	ev := e.lastEvent(tenant, is.Token.ID)
	if ev.Kind != "revoke" || ev.Actor != "key_ops" || *ev.From != "issued" || ev.To != "revoked" || ev.Detail["reason"] != "card reported stolen" {
		t.Errorf("event = %+v", ev)
	}
	if _, err := e.spend(is); !errors.Is(err, token.ErrRevoked) {
		t.Errorf("spend after revoke: %v, want token.ErrRevoked", err)
	}
	if b := e.balance(tenant); b != 0 {
		t.Errorf("balance = %d after spending a revoked token", b)
	}
}

// Revoking anything but an issued token changes nothing and names the state.
func TestRevokeRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, s := range []token.State{token.Pending, token.Unknown, token.Consumed, token.Failed, token.Revoked, token.Expired} {
		is := e.tokenIn(tenant, s)
		before := len(e.events(tenant, is.Token.ID))
		_, err := Revoke(ctx, e.pool, tenant, is.Token.ID, Revocation{Reason: "too late", Actor: "key_ops"})
		if !errors.Is(err, token.ErrInvalidState) || !strings.Contains(err.Error(), string(s)) {
			t.Errorf("revoke a %s token: %v; want token.ErrInvalidState naming %s", s, err, s)
		}
		if got := e.state(tenant, is.Token.ID); got != s {
			t.Errorf("revoke a %s token left it %s", s, got)
		}
		if after := len(e.events(tenant, is.Token.ID)); after != before {
			t.Errorf("revoke a %s token wrote %d events", s, after-before)
		}
	}

	theirs := e.tokenIn(other, token.Issued)
	for _, id := range []string{theirs.Token.ID, token.NewID(), "tok_nope", ""} {
		if _, err := Revoke(ctx, e.pool, tenant, id, Revocation{Reason: "", Actor: "key_ops"}); !errors.Is(err, token.ErrNotFound) {
			t.Errorf("revoke %q: %v; want token.ErrNotFound", id, err)
		}
	}
	if got := e.state(other, theirs.Token.ID); got != token.Issued {
		t.Errorf("another tenant's revoke left the token %s", got)
	}
}

// A reason Postgres cannot store is refused with ErrInvalidRequest (not a
// database error), and the token stays issued.
func TestRevokeRefusesUnstorableReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	is := e.tokenIn(tenant, token.Issued)
	for _, reason := range []string{"fraud\x00", "fraud\xff"} {
		_, err := Revoke(context.Background(), e.pool, tenant, is.Token.ID, Revocation{Reason: reason, Actor: "key_ops"})
		if !errors.Is(err, ErrInvalidRequest) || !errors.Is(err, token.ErrInvalidText) {
			t.Errorf("revoke with reason %q: %v; want ErrInvalidRequest", reason, err)
		}
	}
	if got, n := e.state(tenant, is.Token.ID), len(e.events(tenant, is.Token.ID)); got != token.Issued || n != 1 {
		t.Errorf("token %s with %d events, want issued with 1", got, n)
	}
}

// RevokeTx commits or rolls back with the caller's transaction.
func TestRevokeTxRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Issued)

	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RevokeTx(ctx, tx, tenant, is.Token.ID, Revocation{Reason: "oops", Actor: "key_ops"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.state(tenant, is.Token.ID); got != token.Issued {
		t.Errorf("after rollback the token is %s", got)
	}
	if n := len(e.events(tenant, is.Token.ID)); n != 1 {
		t.Errorf("after rollback the token has %d events, want its issue event only", n)
	}
	if resp, err := e.spend(is); err != nil || resp.State != token.Consumed {
		t.Errorf("spend after a rolled back revoke = %+v, %v", resp, err)
	}
}

// A revoke racing a spend of the same token: exactly one wins, the loser is
// told the winner's state, and the ledger holds exactly the spends that won.
func TestRevokeRacingSpend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const trials = 100
	var spends, revokes int
	for i := range trials {
		is := e.issue(tenant, ledger.Credit)
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			spendErr error
			revErr   error
		)
		wg.Go(func() {
			<-start
			_, spendErr = e.spend(is)
		})
		wg.Go(func() {
			<-start
			_, revErr = Revoke(ctx, e.pool, tenant, is.Token.ID, Revocation{Reason: "race", Actor: "key_ops"})
		})
		close(start)
		wg.Wait()

		final := e.state(tenant, is.Token.ID)
		switch {
		case spendErr == nil && errors.Is(revErr, token.ErrInvalidState) && final == token.Consumed:
			if !strings.Contains(revErr.Error(), "consumed") {
				t.Errorf("trial %d: the revoke lost to a spend but says %v", i, revErr)
			}
			spends++
		case revErr == nil && errors.Is(spendErr, token.ErrRevoked) && final == token.Revoked:
			revokes++
		default:
			t.Fatalf("trial %d: spend %v, revoke %v, token %s; want exactly one winner", i, spendErr, revErr, final)
		}
		// The issue and the winner's transition, nothing from the loser.
		if n := len(e.events(tenant, is.Token.ID)); n != 2 {
			t.Errorf("trial %d: %d events, want 2", i, n)
		}
	}
	t.Logf("%d trials: %d spends won, %d revokes won", trials, spends, revokes)
	if b := e.balance(tenant); b != int64(spends) {
		t.Errorf("balance = %d, want %d (one credit per spend that won)", b, spends)
	}
	if n := e.count(`SELECT count(*) FROM ledger_entries`); n != int64(spends) {
		t.Errorf("%d ledger entries, want %d", n, spends)
	}
}

// The miss path of a conditional transition locks the row, so what it
// reports holds until the caller's transaction ends.
func TestRevokeTxExplanationHoldsTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Consumed)

	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := RevokeTx(ctx, tx, tenant, is.Token.ID, Revocation{Reason: "", Actor: "key_ops"}); !errors.Is(err, token.ErrInvalidState) {
			t.Errorf("RevokeTx = %v, want token.ErrInvalidState", err)
		}
		var locked bool
		err := e.pool.QueryRow(ctx, `SELECT count(*) = 0 FROM (SELECT 1 FROM tokens WHERE tenant_id = $1 AND id = $2 FOR UPDATE SKIP LOCKED) x`, tenant, is.Token.ID).Scan(&locked)
		if err != nil {
			return err
		}
		if !locked {
			t.Error("the token is not locked after RevokeTx explained its refusal")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A token that moves into unknown between a reconcile's UPDATE missing it
// and the lock that explains the miss is reconciled after all, not refused
// as "pending". (A revoke cannot meet this: it locks the token before its
// UPDATE, to judge the expiry once it holds it.) Not parallel: it sets a
// package-level hook.
func TestReconcileTokenMovedUnderIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Pending)
	store.TestHookAfterMiss = func() {
		if _, err := consume.Finish(ctx, e.pool, token.ReportUnknown, consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: 1, Actor: "holder"}); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { store.TestHookAfterMiss = nil })

	rec, err := Reconcile(ctx, e.pool, tenant, is.Token.ID, Reconciliation{Outcome: NotExecuted, Actor: "key_ops"})
	if err != nil || rec.State != token.Issued {
		t.Fatalf("Reconcile = %s, %v; want issued", rec.State, err)
	}
	var kinds []string
	for _, ev := range e.events(tenant, is.Token.ID) {
		kinds = append(kinds, ev.Kind)
	}
	if want := []string{"issued", "lease", "report_unknown", "reconcile_not_executed"}; !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
}
