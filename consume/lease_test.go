package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const payOp = "payment.capture"

func (e *env) declareLease(policy operation.ExpiryPolicy) {
	e.t.Helper()
	_, err := operation.Put(context.Background(), e.pool, tenant, operation.Policy{Name: payOp, Mode: operation.Lease, OnLeaseExpiry: policy, LeaseSeconds: 60}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) lapseLease(id string) {
	e.t.Helper()
	e.exec(`UPDATE tokens SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
}

func (e *env) grant(is intent.Issued) *consume.Lease {
	e.t.Helper()
	resp, err := e.spender.Spend(context.Background(), e.pool, e.spendReq(is, map[string]any{"amount": 1}))
	if err != nil {
		e.t.Fatalf("lease spend: %v", err)
	}
	if resp.Status != http.StatusAccepted || resp.State != token.Pending || resp.Lease == nil {
		e.t.Fatalf("lease spend = %d %s %v", resp.Status, resp.State, resp.Lease)
	}
	return resp.Lease
}

func report(is intent.Issued, gen int64, result any) consume.Report {
	return consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: gen, Result: result, Actor: "holder"}
}

func TestLeaseCompleteThenReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryUnknown)
	is := e.issue(payOp, "alice", nil)

	l := e.grant(is)
	if l.Generation != 1 || l.OperationID == "" {
		t.Fatalf("lease = %+v", l)
	}
	// A second spender while the lease is live is told to come back later.
	_, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"amount": 1}))
	var ip *consume.InProgressError
	if !errors.As(err, &ip) || ip.RetryAfterSeconds < 1 || ip.RetryAfterSeconds > 60 {
		t.Fatalf("spend during lease: %v", err)
	}

	done, err := consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation, map[string]string{"capture": "cap_1"}))
	if err != nil {
		t.Fatal(err)
	}
	if done.State != token.Consumed || done.Status != http.StatusOK {
		t.Fatalf("complete = %d %s", done.Status, done.State)
	}
	// The holder's retry of complete and a later spend both replay it.
	again, err := consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation, nil))
	if err != nil || !again.Replayed || string(again.Body) != string(done.Body) {
		t.Fatalf("repeated complete = %+v %v", again, err)
	}
	spent, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"amount": 1}))
	if err != nil || !spent.Replayed || string(spent.Body) != string(done.Body) {
		t.Fatalf("spend after complete = %s %v, want replay of %s", spent.Body, err, done.Body)
	}
	var body struct {
		State  string            `json:"state"`
		Result map[string]string `json:"result"`
	}
	if err := json.Unmarshal(spent.Body, &body); err != nil || body.State != "consumed" || body.Result["capture"] != "cap_1" {
		t.Fatalf("stored body = %s", spent.Body)
	}
}

func TestLeaseTakeoverFencesTheLateHolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryTakeover)
	is := e.issue(payOp, "bob", nil)

	first := e.grant(is)
	e.lapseLease(is.Token.ID) // the first holder crashed and never reported

	second := e.grant(is)
	if second.Generation != first.Generation+1 || second.OperationID != first.OperationID {
		t.Fatalf("takeover = %+v after %+v: want next generation, same operation id", second, first)
	}
	// The first holder wakes up and tries to finish: fenced, nothing written.
	_, err := consume.Finish(ctx, e.pool, token.Complete, report(is, first.Generation, "late"))
	if !errors.Is(err, token.ErrStaleGeneration) {
		t.Fatalf("late complete: %v, want stale generation", err)
	}
	if s := e.state(is.Token.ID); s != token.Pending {
		t.Fatalf("state = %s after the stale complete, want pending", s)
	}
	if _, err := consume.Finish(ctx, e.pool, token.Fail, report(is, second.Generation, "declined")); err != nil {
		t.Fatal(err)
	}
	if s := e.state(is.Token.ID); s != token.Failed {
		t.Fatalf("state = %s, want failed", s)
	}
}

func TestLeaseLapseWithUnknownPolicyWaitsForOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryUnknown)
	is := e.issue(payOp, "carol", nil)

	l := e.grant(is)
	e.lapseLease(is.Token.ID)
	for range 3 { // however often it is retried, nothing re-executes
		_, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"amount": 1}))
		if !errors.Is(err, token.ErrOutcomeUnknown) {
			t.Fatalf("spend after lapse: %v, want outcome unknown", err)
		}
	}
	if s := e.state(is.Token.ID); s != token.Unknown {
		t.Fatalf("state = %s, want unknown", s)
	}
	var gen int64
	if err := e.pool.QueryRow(ctx, `SELECT generation FROM tokens WHERE id = $1`, is.Token.ID).Scan(&gen); err != nil || gen != l.Generation {
		t.Fatalf("generation = %d (%v), want %d: no new execution rights", gen, err, l.Generation)
	}
	_, err := consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation, nil))
	if !errors.Is(err, token.ErrOutcomeUnknown) {
		t.Fatalf("complete after lapse: %v, want outcome unknown (an operator reconciles)", err)
	}
}

func TestLeaseReportUnknownAndInvalidReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryTakeover)
	is := e.issue(payOp, "dave", nil)
	issuedOnly := e.issue(payOp, "dave", nil)

	if _, err := consume.Finish(ctx, e.pool, token.Complete, report(issuedOnly, 0, nil)); !errors.Is(err, token.ErrInvalidState) {
		t.Fatalf("complete of an issued token: %v, want invalid state", err)
	}
	l := e.grant(is)
	if _, err := consume.Finish(ctx, e.pool, token.Complete, consume.Report{Tenant: "other", TokenID: is.Token.ID, Generation: l.Generation}); !errors.Is(err, token.ErrNotFound) {
		t.Fatalf("complete from another tenant: %v, want not found", err)
	}
	if _, err := consume.Finish(ctx, e.pool, token.Complete, consume.Report{Tenant: tenant, TokenID: is.Token.ID, Generation: l.Generation, Status: 500}); !errors.Is(err, consume.ErrInvalidPayload) {
		t.Fatalf("complete with status 500: %v, want invalid payload", err)
	}
	resp, err := consume.Finish(ctx, e.pool, token.ReportUnknown, report(is, l.Generation, nil))
	if err != nil || resp.State != token.Unknown {
		t.Fatalf("report unknown = %+v %v", resp, err)
	}
	// Even with a takeover policy, an unknown token is not spendable.
	if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"amount": 1})); !errors.Is(err, token.ErrOutcomeUnknown) {
		t.Fatalf("spend of unknown token: %v", err)
	}
}
