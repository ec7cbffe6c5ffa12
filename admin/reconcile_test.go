package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/token"
)

// An operator's outcome is stored like a spender's and replayed to every
// later spend, byte for byte.
func TestReconcileStoresOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		r          Reconciliation
		wantState  token.State
		wantStatus int
		wantBody   string
	}{
		{
			name:      "succeeded, default status",
			r:         Reconciliation{Outcome: Succeeded, Result: map[string]string{"charge": "ch_1"}},
			wantState: token.Consumed, wantStatus: 200,
			wantBody: `{"token_id":"ID","state":"consumed","result":{"charge":"ch_1"}}`,
		},
		{
			name:      "succeeded, given status",
			r:         Reconciliation{Outcome: Succeeded, Status: 201, Result: []int{1, 2}},
			wantState: token.Consumed, wantStatus: 201,
			wantBody: `{"token_id":"ID","state":"consumed","result":[1,2]}`,
		},
		{
			name:      "succeeded, no result",
			r:         Reconciliation{Outcome: Succeeded},
			wantState: token.Consumed, wantStatus: 200,
			wantBody: `{"token_id":"ID","state":"consumed"}`,
		},
		{
			name:      "failed, default status",
			r:         Reconciliation{Outcome: Failed, Result: map[string]string{"code": "card_declined"}},
			wantState: token.Failed, wantStatus: 422,
			wantBody: `{"token_id":"ID","state":"failed","error":{"code":"card_declined"}}`,
		},
		{
			name:      "failed, given status",
			r:         Reconciliation{Outcome: Failed, Status: 502, Result: "gateway lost it"},
			wantState: token.Failed, wantStatus: 502,
			wantBody: `{"token_id":"ID","state":"failed","error":"gateway lost it"}`,
		},
	}
	e := newEnv(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := e.tokenIn(tenant, token.Unknown)
			id := is.Token.ID
			wantBody := strings.Replace(tt.wantBody, "ID", id, 1)
			tt.r.Actor = "key_ops"

			rec, err := Reconcile(ctx, e.pool, tenant, id, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != tt.wantState || rec.ResultStatus != tt.wantStatus || string(rec.ResultBody) != wantBody {
				t.Errorf("Reconcile = %s %d %s; want %s %d %s", rec.State, rec.ResultStatus, rec.ResultBody, tt.wantState, tt.wantStatus, wantBody)
			}
			if rec.FinishedAt == nil || rec.LeaseExpiresAt != nil || rec.Generation != 1 {
				t.Errorf("Reconcile = finished %v, lease %v, generation %d; want finished, no lease, generation 1", rec.FinishedAt, rec.LeaseExpiresAt, rec.Generation)
			}
			ev := e.lastEvent(tenant, id)
			if ev.Kind != string(tt.r.action()) || ev.Actor != "key_ops" || *ev.From != "unknown" || ev.To != string(tt.wantState) || ev.Detail["status"] != float64(tt.wantStatus) {
				t.Errorf("event = %+v", ev)
			}
			e.replays(is, tt.wantStatus, []byte(wantBody))
		})
	}
}

// not_executed hands the token back for another spend under a new
// generation; the holder that lost track of it is fenced off, and the
// downstream operation id stays the same.
func TestReconcileNotExecuted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.issue(tenant, payOp)
	first := e.lease(is)
	if _, err := consume.Finish(ctx, e.pool, token.ReportUnknown, consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: first.Generation}); err != nil {
		t.Fatal(err)
	}

	rec, err := Reconcile(ctx, e.pool, tenant, is.Token.ID, Reconciliation{Outcome: NotExecuted, Actor: "key_ops"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != token.Issued || rec.Generation != first.Generation+1 || rec.LeaseExpiresAt != nil || rec.ResultStatus != 0 || rec.FinishedAt != nil {
		t.Errorf("Reconcile = %+v; want issued, generation %d, no lease, no outcome", rec, first.Generation+1)
	}
	ev := e.lastEvent(tenant, is.Token.ID)
	if ev.Kind != "reconcile_not_executed" || *ev.From != "unknown" || ev.To != "issued" || ev.Generation != rec.Generation {
		t.Errorf("event = %+v", ev)
	}

	second := e.lease(is)
	if second.Generation <= rec.Generation || second.OperationID != first.OperationID {
		t.Errorf("second lease = %+v; want a generation above %d and operation id %s", second, rec.Generation, first.OperationID)
	}
	late := consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: first.Generation, Result: "done"}
	if _, err := consume.Finish(ctx, e.pool, token.Complete, late); !errors.Is(err, token.ErrStaleGeneration) {
		t.Errorf("the first holder completes after the reconcile: %v, want token.ErrStaleGeneration", err)
	}
	now := consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: second.Generation, Result: "done"}
	if resp, err := consume.Finish(ctx, e.pool, token.Complete, now); err != nil || resp.State != token.Consumed {
		t.Errorf("the second holder completes: %+v, %v", resp, err)
	}
}

// Finishing moves retain_until to the retention period from now, unless it
// was already later.
func TestReconcileRetention(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, retainUntil string // SQL for the retain_until before the reconcile
		extended          bool
	}{
		{"retention passed while unknown", `now() - interval '1 hour'`, true},
		{"retention ends soon", `now() + interval '1 minute'`, true},
		{"retention ends later", `now() + interval '30 days'`, false},
	}
	e := newEnv(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := e.tokenIn(tenant, token.Unknown).Token.ID
			e.exec(`UPDATE tokens SET retain_until = `+tt.retainUntil+` WHERE id = $1`, id)
			before := e.record(tenant, id).RetainUntil

			if _, err := Reconcile(ctx, e.pool, tenant, id, Reconciliation{Outcome: Succeeded}); err != nil {
				t.Fatal(err)
			}
			extended := e.count(`SELECT count(*) FROM tokens WHERE id = $1 AND retain_until = finished_at + make_interval(secs => retention_seconds)`, id) == 1
			kept := e.record(tenant, id).RetainUntil.Equal(before)
			if extended != tt.extended || kept == tt.extended {
				t.Errorf("retain_until extended = %v, kept = %v; want extended = %v", extended, kept, tt.extended)
			}
		})
	}
}

func TestReconcileRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	ok := Reconciliation{Outcome: Succeeded, Actor: "key_ops"}

	for _, s := range []token.State{token.Issued, token.Pending, token.Consumed, token.Failed, token.Revoked, token.Expired} {
		is := e.tokenIn(tenant, s)
		before := len(e.events(tenant, is.Token.ID))
		for _, o := range []Outcome{Succeeded, NotExecuted, Failed} {
			_, err := Reconcile(ctx, e.pool, tenant, is.Token.ID, Reconciliation{Outcome: o})
			if !errors.Is(err, token.ErrInvalidState) || !strings.Contains(err.Error(), string(s)) {
				t.Errorf("reconcile %s a %s token: %v; want token.ErrInvalidState naming %s", o, s, err, s)
			}
			// The refusal speaks the operator's words, not an event kind.
			if want := "cannot reconcile as "; err != nil && (!strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "reconcile_")) {
				t.Errorf("reconcile %s a %s token: %q; want it to say %q", o, s, err, want)
			}
		}
		if got := e.state(tenant, is.Token.ID); got != s {
			t.Errorf("reconciling a %s token left it %s", s, got)
		}
		if after := len(e.events(tenant, is.Token.ID)); after != before {
			t.Errorf("reconciling a %s token wrote %d events", s, after-before)
		}
	}

	theirs := e.tokenIn(other, token.Unknown)
	for _, id := range []string{theirs.Token.ID, token.NewID(), "not-an-id"} {
		if _, err := Reconcile(ctx, e.pool, tenant, id, ok); !errors.Is(err, token.ErrNotFound) {
			t.Errorf("reconcile %q: %v; want token.ErrNotFound", id, err)
		}
	}
	if got := e.state(other, theirs.Token.ID); got != token.Unknown {
		t.Errorf("another tenant's reconcile left the token %s", got)
	}
}

// A malformed reconciliation is refused before it touches the token.
func TestReconcileInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    Reconciliation
	}{
		{"no outcome", Reconciliation{}},
		{"unknown outcome", Reconciliation{Outcome: "maybe"}},
		{"outcome in capitals", Reconciliation{Outcome: "SUCCEEDED"}},
		{"succeeded with a failure status", Reconciliation{Outcome: Succeeded, Status: 422}},
		{"succeeded with a 1xx", Reconciliation{Outcome: Succeeded, Status: 100}},
		{"succeeded with a redirect", Reconciliation{Outcome: Succeeded, Status: 302}},
		{"failed with a success status", Reconciliation{Outcome: Failed, Status: 200}},
		{"failed with a status past 5xx", Reconciliation{Outcome: Failed, Status: 600}},
		// Statuses that cannot carry a body: the stored body would be lost on
		// every replay.
		{"succeeded with 204", Reconciliation{Outcome: Succeeded, Status: 204, Result: "x"}},
		{"succeeded with 205", Reconciliation{Outcome: Succeeded, Status: 205}},
		{"succeeded with 304", Reconciliation{Outcome: Succeeded, Status: 304}},
		{"failed with 103", Reconciliation{Outcome: Failed, Status: 103, Result: "x"}},
		{"failed with 204", Reconciliation{Outcome: Failed, Status: 204}},
		{"not executed with a status", Reconciliation{Outcome: NotExecuted, Status: 200}},
		{"not executed with a result", Reconciliation{Outcome: NotExecuted, Result: "x"}},
		{"result that is not JSON", Reconciliation{Outcome: Succeeded, Result: make(chan int)}},
	}
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Unknown)
	for _, tt := range tests {
		_, err := Reconcile(ctx, e.pool, tenant, is.Token.ID, tt.r)
		if !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", tt.name, err)
		}
	}
	if got := e.state(tenant, is.Token.ID); got != token.Unknown {
		t.Errorf("after invalid reconciliations the token is %s", got)
	}
	if n := len(e.events(tenant, is.Token.ID)); n != 3 {
		t.Errorf("after invalid reconciliations the token has %d events, want 3 (issue, lease, report)", n)
	}
}

// ReconcileTx commits or rolls back with the caller's transaction.
func TestReconcileTxRollsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	is := e.tokenIn(tenant, token.Unknown)

	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReconcileTx(ctx, tx, tenant, is.Token.ID, Reconciliation{Outcome: Succeeded}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.record(tenant, is.Token.ID); got.State != token.Unknown || got.ResultBody != nil {
		t.Errorf("after rollback the token is %s with body %s", got.State, got.ResultBody)
	}
	if _, err := e.spend(is); !errors.Is(err, token.ErrOutcomeUnknown) {
		t.Errorf("spend after a rolled back reconcile: %v, want token.ErrOutcomeUnknown", err)
	}
}
