package clienttest_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/tokend/tokend/client"
)

// TestOperatorCalls drives every operator route through the client against
// a real tokend: operations, the listing's pages, inspect, revoke,
// reconcile, purge and stats.
func TestOperatorCalls(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	ctx := t.Context()
	c := newClient(t, srv.url, srv.client, &wire{})
	op := newClient(t, srv.url, srv.op, &wire{})

	put, err := op.PutOperation(ctx, "pay.card", client.Policy{Mode: "lease", OnLeaseExpiry: "unknown", LeaseSeconds: 600, IgnoredFields: []string{"trace_id"}})
	if err != nil || put.Name != "pay.card" || put.Mode != "lease" || put.LeaseSeconds != 600 {
		t.Fatalf("PutOperation = %+v, %v", put, err)
	}
	if got, err := op.GetOperation(ctx, "pay.card"); err != nil || got.OnLeaseExpiry != "unknown" || len(got.IgnoredFields) != 1 {
		t.Errorf("GetOperation = %+v, %v", got, err)
	}
	if ops, err := op.Operations(ctx); err != nil || len(ops.Items) == 0 {
		t.Errorf("Operations = %+v, %v", ops, err)
	}

	var ids []string
	for _, intent := range []string{"a", "b", "c", "d", "e"} {
		tok, err := c.Issue(ctx, client.IssueRequest{IntentID: intent, Operation: "pay.card", Subject: "user-1", TTLSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	pages, seen := 0, 0
	for p, err := range op.Pages(ctx, client.Filter{Operation: "pay.card", Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		seen += len(p.Items)
	}
	if pages != 3 || seen != 5 {
		t.Errorf("Pages: %d pages, %d tokens; want 3 pages of 5 tokens", pages, seen)
	}
	n := 0
	for r, err := range op.Tokens(ctx, client.Filter{State: client.Issued, Limit: 2}) {
		if err != nil || r.State != client.Issued {
			t.Fatalf("Tokens: %+v, %v", r, err)
		}
		if n++; n == 3 {
			break // stopping early is fine
		}
	}

	rev, err := op.Revoke(ctx, ids[0], "fraud")
	if err != nil || rev.State != client.Revoked {
		t.Errorf("Revoke = %+v, %v", rev, err)
	}
	if _, err := op.Revoke(ctx, ids[0], "again"); !errors.Is(err, client.ErrInvalidState) {
		t.Errorf("Revoke again = %v, want ErrInvalidState", err)
	}
	d, err := op.Inspect(ctx, ids[0])
	if err != nil || d.State != client.Revoked || len(d.Events) < 2 || d.IntentID != "a" {
		t.Errorf("Inspect = %+v, %v", d, err)
	}

	// An unknown outcome, settled by the operator.
	tok, err := c.Issue(ctx, client.IssueRequest{IntentID: "f", Operation: "pay.card", Subject: "user-1", TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"})
	if err != nil || out.Lease == nil {
		t.Fatalf("spend = %+v, %v", out, err)
	}
	if _, err := out.Lease.Unknown(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := op.Stats(ctx); err != nil || st.Unknown != 1 {
		t.Errorf("Stats = %+v, %v, want one unknown", st, err)
	}
	rec, err := op.Reconcile(ctx, tok.ID, client.Reconciliation{Outcome: client.OutcomeSucceeded, Status: http.StatusOK, Result: map[string]string{"charge": "ch_9"}})
	if err != nil || rec.State != client.Consumed {
		t.Errorf("Reconcile = %+v, %v", rec, err)
	}
	if replay, err := c.Spend(ctx, client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"}); err != nil ||
		!replay.Replayed || string(replay.Result) != `{"charge":"ch_9"}` {
		t.Errorf("spend after reconcile = %+v, %v", replay, err)
	}

	if p, err := op.Purge(ctx); err != nil || p.Purged != 0 {
		t.Errorf("Purge = %+v, %v, want nothing past retention", p, err)
	}
	if _, err := op.DeleteOperation(ctx, "pay.card"); !errors.Is(err, client.ErrOperationInUse) {
		t.Errorf("DeleteOperation with issued tokens = %v, want ErrOperationInUse", err)
	}
	if _, err := op.GetOperation(ctx, "no.such"); !errors.Is(err, client.ErrUnknownOperation) {
		t.Errorf("GetOperation(no.such) = %v, want ErrUnknownOperation", err)
	}
}

// TestRealProblems provokes problems from a real tokend and checks the
// sentinel each one matches.
func TestRealProblems(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	ctx := t.Context()
	c := newClient(t, srv.url, srv.client, &wire{})
	credit := func(intent string, amount int) client.IssueRequest {
		return client.IssueRequest{IntentID: intent, Operation: "ledger.credit", Subject: "user-1", TTLSeconds: 60,
			Payload: map[string]any{"account": "acct-1", "amount": amount}}
	}
	tok, err := c.Issue(ctx, credit("i-1", 5))
	if err != nil {
		t.Fatal(err)
	}
	spend := client.SpendRequest{Token: tok.Token, Operation: "ledger.credit", Subject: "user-1", Payload: map[string]any{"account": "acct-1", "amount": 5}}
	otherSubject, otherPayload := spend, spend
	otherSubject.Subject = "user-2"
	otherPayload.Payload = map[string]any{"account": "acct-1", "amount": 6}
	bad, _ := client.New(srv.url, "not-a-key", fast)
	globex := newClient(t, srv.url, srv.clientOfGlobex, &wire{})

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"intent reused", func() error { _, err := c.Issue(ctx, credit("i-1", 7)); return err }, client.ErrIdempotencyKeyReused},
		{"unknown operation", func() error {
			_, err := c.Issue(ctx, client.IssueRequest{IntentID: "i-2", Operation: "no.such", Subject: "u", TTLSeconds: 60})
			return err
		}, client.ErrUnknownOperation},
		{"invalid request", func() error {
			_, err := c.Issue(ctx, client.IssueRequest{IntentID: "i-3", Operation: "ledger.credit", Subject: "u"})
			return err
		}, client.ErrInvalidRequest},
		{"binding mismatch", func() error { _, err := c.Spend(ctx, otherSubject); return err }, client.ErrBindingMismatch},
		{"payload mismatch", func() error { _, err := c.Spend(ctx, otherPayload); return err }, client.ErrPayloadMismatch},
		{"unauthorized", func() error { _, err := bad.Token(ctx, tok.ID); return err }, client.ErrUnauthorized},
		{"forbidden", func() error { _, err := c.Stats(ctx); return err }, client.ErrForbidden},
		{"another tenant's token", func() error { _, err := globex.Token(ctx, tok.ID); return err }, client.ErrTokenNotFound},
		{"never leased", func() error { _, err := c.Complete(ctx, tok.ID, client.Report{Generation: 0}); return err }, client.ErrInvalidState},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}
