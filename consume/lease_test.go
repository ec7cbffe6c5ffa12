package consume_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
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
	// The holder's retry of complete is told it was recorded; a later spend
	// replays the stored outcome.
	again, err := consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation, map[string]string{"capture": "cap_1"}))
	if err != nil || !again.Replayed || again.State != done.State || again.Status != done.Status || again.Generation != done.Generation {
		t.Fatalf("repeated complete = %+v %v, want %+v replayed", again, err, done)
	}
	spent, err := e.spender.Spend(ctx, e.pool, e.spendReq(is, map[string]any{"amount": 1}))
	if err != nil || !spent.Replayed || spent.Status != http.StatusOK {
		t.Fatalf("spend after complete = %d %s %v, want the stored outcome replayed", spent.Status, spent.Body, err)
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

// row is what a report may change: the token's row and its audit trail.
type row struct {
	State      token.State
	Generation int64
	Status     int // 0: none stored
	Body       string
	Events     int
}

func (e *env) row(id string) row {
	e.t.Helper()
	var r row
	err := e.pool.QueryRow(context.Background(), `
		SELECT state, generation, coalesce(result_status, 0), coalesce(convert_from(result_body, 'UTF8'), ''),
		       (SELECT count(*) FROM token_events WHERE tenant_id = $1 AND token_id = $2)
		FROM tokens WHERE tenant_id = $1 AND id = $2`, tenant, id).
		Scan(&r.State, &r.Generation, &r.Status, &r.Body, &r.Events)
	if err != nil {
		e.t.Fatalf("row of %s: %v", id, err)
	}
	return r
}

// A report repeated after its answer was lost gets the same answer again,
// marked replayed, and writes nothing; a different report for the same
// generation is refused and writes nothing either.
func TestLeaseReportRepeated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		action token.Action
		first  consume.Report // Tenant, TokenID and Generation filled in
		same   consume.Report // the same report, spelled differently
		want   consume.Recorded
		others []consume.Report // different reports for the same generation
	}{
		{
			name:   "complete",
			action: token.Complete,
			first:  consume.Report{Result: json.RawMessage(`{"charge":"ch_1","amount":10}`)},
			same:   consume.Report{Status: 200, Result: json.RawMessage(`{"amount":1e1,"charge":"ch_1"}`)},
			want:   consume.Recorded{State: token.Consumed, Status: 200},
			others: []consume.Report{
				{Result: json.RawMessage(`{"charge":"ch_2","amount":10}`)},
				{Status: 201, Result: json.RawMessage(`{"charge":"ch_1","amount":10}`)},
				{},
			},
		},
		{
			name:   "fail",
			action: token.Fail,
			first:  consume.Report{Status: 402, Result: json.RawMessage(`{"reason":"declined"}`)},
			same:   consume.Report{Status: 402, Result: json.RawMessage(` { "reason" : "declined" } `)},
			want:   consume.Recorded{State: token.Failed, Status: 402},
			others: []consume.Report{
				{Result: json.RawMessage(`{"reason":"declined"}`)}, // default 422
				{Status: 402, Result: json.RawMessage(`{"reason":"expired"}`)},
			},
		},
		{
			name:   "unknown",
			action: token.ReportUnknown,
			want:   consume.Recorded{State: token.Unknown},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			e.declareLease(operation.OnExpiryTakeover)
			is := e.issue(payOp, "erin", nil)
			l := e.grant(is)
			fill := func(r consume.Report) consume.Report {
				r.Tenant, r.TokenID, r.Generation, r.Actor = tenant, is.Token.ID, l.Generation, "holder"
				return r
			}
			want := tt.want
			want.TokenID, want.Generation = is.Token.ID, l.Generation

			first, err := consume.Finish(ctx, e.pool, tt.action, fill(tt.first))
			if err != nil || first != want {
				t.Fatalf("first report = %+v, %v; want %+v", first, err, want)
			}
			recorded := e.row(is.Token.ID)
			want.Replayed = true
			for i, r := range []consume.Report{tt.first, tt.same} {
				again, err := consume.Finish(ctx, e.pool, tt.action, fill(r))
				if err != nil || again != want {
					t.Errorf("repeat %d = %+v, %v; want %+v", i, again, err, want)
				}
			}
			// Every other report for this generation: the other actions, and
			// this action with other content.
			var others []func() error
			for _, a := range []token.Action{token.Complete, token.Fail, token.ReportUnknown} {
				if a != tt.action {
					r := consume.Report{Result: tt.first.Result} // the action's default status
					others = append(others, func() error { _, err := consume.Finish(ctx, e.pool, a, fill(r)); return err })
				}
			}
			for _, r := range tt.others {
				others = append(others, func() error { _, err := consume.Finish(ctx, e.pool, tt.action, fill(r)); return err })
			}
			for i, try := range others {
				if err := try(); !errors.Is(err, consume.ErrReportConflict) {
					t.Errorf("different report %d: %v, want ErrReportConflict", i, err)
				}
			}
			if got := e.row(is.Token.ID); got != recorded {
				t.Errorf("after the repeats the token is %+v, want %+v as first recorded", got, recorded)
			}
		})
	}
}

// A report on a token that was never leased, or quoting a generation never
// granted, is refused as invalid state, whatever the token stored; one
// quoting a generation taken over is stale.
func TestLeaseReportNotGranted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryTakeover)

	atomic := e.issue(ledger.Credit, "frank", credit("frank", 5))
	if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(atomic, credit("frank", 5))); err != nil {
		t.Fatal(err)
	}
	issued := e.issue(payOp, "frank", nil)
	leased := e.issue(payOp, "frank", nil)
	e.grant(leased)
	e.lapseLease(leased.Token.ID)
	l := e.grant(leased) // a takeover: generation 2

	tests := []struct {
		name string
		is   intent.Issued
		gen  int64
		want error
	}{
		{"atomic, spent", atomic, 0, token.ErrInvalidState},
		{"atomic, generation 1", atomic, 1, token.ErrInvalidState},
		{"lease mode, still issued", issued, 0, token.ErrInvalidState},
		{"lease mode, still issued, generation 1", issued, 1, token.ErrInvalidState},
		{"generation never granted", leased, l.Generation + 1, token.ErrInvalidState},
		{"generation taken over", leased, l.Generation - 1, token.ErrStaleGeneration},
	}
	for _, tt := range tests {
		before := e.row(tt.is.Token.ID)
		for _, a := range []token.Action{token.Complete, token.Fail, token.ReportUnknown} {
			r := consume.Report{Tenant: tenant, TokenID: tt.is.Token.ID, Generation: tt.gen, Actor: "holder"}
			if _, err := consume.Finish(ctx, e.pool, a, r); !errors.Is(err, tt.want) {
				t.Errorf("%s: %s = %v, want %v", tt.name, a, err, tt.want)
			}
		}
		if got := e.row(tt.is.Token.ID); got != before {
			t.Errorf("%s: the reports changed the token: %+v, was %+v", tt.name, got, before)
		}
	}
}

// A report's refusals are the typed errors the API reads field, reason and
// detail from, and still match their sentinels: a result that is not JSON
// names "result", a bad status "status", a report on a token never leased
// or a second report for a generation says why.
func TestLeaseReportRefusalsAreTyped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryTakeover)
	is := e.issue(payOp, "hana", nil)
	issuedOnly := e.issue(payOp, "hana", nil)
	l := e.grant(is)

	invalid := func(name string, err error, field string, kinds ...error) {
		t.Helper()
		var ie *tokend.InvalidInputError
		if !errors.As(err, &ie) || ie.Field != field || ie.Reason == "" {
			t.Errorf("%s: %v (%#v), want an InvalidInputError naming %q with a reason", name, err, ie, field)
		}
		for _, k := range kinds {
			if !errors.Is(err, k) {
				t.Errorf("%s: %v does not match %v", name, err, k)
			}
		}
	}
	for _, a := range []token.Action{token.Complete, token.Fail} {
		_, err := consume.Finish(ctx, e.pool, a, report(is, l.Generation, json.RawMessage(`{"charge":`)))
		invalid(string(a)+" with a result that is not JSON", err, "result", consume.ErrInvalidPayload)
	}
	r := report(is, l.Generation, map[string]string{"k": "v"})
	r.Status = 500
	_, err := consume.Finish(ctx, e.pool, token.Complete, r)
	invalid("complete with status 500", err, "status", consume.ErrInvalidPayload, token.ErrInvalidStatus)

	refused := func(name string, err error, kind error, detail string) {
		t.Helper()
		var re *tokend.RefusalError
		if !errors.As(err, &re) || re.Kind != kind || re.Detail != detail || !errors.Is(err, kind) {
			t.Errorf("%s: %v (%#v), want a RefusalError of %v with detail %q", name, err, re, kind, detail)
		}
	}
	_, err = consume.Finish(ctx, e.pool, token.Complete, report(issuedOnly, 0, nil))
	refused("complete of a token never leased", err, token.ErrInvalidState, "cannot complete a token that was never leased")
	_, err = consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation+1, nil))
	refused("complete of a generation never granted", err, token.ErrInvalidState, fmt.Sprintf("generation %d was never granted", l.Generation+1))
	if _, err := consume.Finish(ctx, e.pool, token.ReportUnknown, report(is, l.Generation, nil)); err != nil {
		t.Fatal(err)
	}
	_, err = consume.Finish(ctx, e.pool, token.Complete, report(is, l.Generation, nil))
	refused("complete after unknown", err, consume.ErrReportConflict, fmt.Sprintf("a different report (report_unknown) was already recorded for generation %d", l.Generation))
}

// A status that cannot carry a body is refused when reported, since the
// stored outcome is replayed with its body; the token stays pending.
func TestLeaseReportRefusesBodilessStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryUnknown)
	is := e.issue(payOp, "gina", nil)
	l := e.grant(is)
	before := e.row(is.Token.ID)
	for _, a := range []token.Action{token.Complete, token.Fail} {
		for _, status := range []int{100, 101, 103, 204, 205, 304} {
			r := report(is, l.Generation, map[string]string{"k": "v"})
			r.Status = status
			_, err := consume.Finish(ctx, e.pool, a, r)
			if !errors.Is(err, consume.ErrInvalidPayload) || !errors.Is(err, token.ErrInvalidStatus) {
				t.Errorf("%s with status %d: %v, want invalid payload and invalid status", a, status, err)
			}
		}
	}
	if got := e.row(is.Token.ID); got != before {
		t.Errorf("refused reports changed the token: %+v, was %+v", got, before)
	}
}

// Holders racing to report one generation: exactly one report is recorded;
// the same report from the others is replayed, a different one refused.
func TestLeaseReportConcurrent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryUnknown)
	is := e.issue(payOp, "ivan", nil)
	l := e.grant(is)

	const n = 8
	type result struct {
		rec consume.Recorded
		err error
	}
	results := make(chan result, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Go(func() {
			r := report(is, l.Generation, map[string]string{"capture": "cap_1"})
			if i%2 == 1 {
				r.Result = map[string]string{"capture": "cap_2"}
			}
			rec, err := consume.Finish(ctx, e.pool, token.Complete, r)
			results <- result{rec, err}
		})
	}
	wg.Wait()
	close(results)
	var recorded, replayed, conflicts int
	for r := range results {
		switch {
		case r.err == nil && !r.rec.Replayed:
			recorded++
		case r.err == nil:
			replayed++
		case errors.Is(r.err, consume.ErrReportConflict):
			conflicts++
		default:
			t.Errorf("report: %v", r.err)
		}
	}
	if recorded != 1 || replayed != n-1 || conflicts != n {
		t.Errorf("recorded %d, replayed %d, refused %d; want 1, %d, %d", recorded, replayed, conflicts, n-1, n)
	}
	var completions int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM token_events WHERE token_id = $1 AND kind = 'complete'`, is.Token.ID).Scan(&completions); err != nil || completions != 1 {
		t.Errorf("%d completions in the audit trail (%v), want 1", completions, err)
	}
}
