package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tokend/tokend/token"
)

func TestConsumeBindingMismatch(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tok := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	spend := func(op, subject string) response {
		return a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":%q,"subject":%q,"payload":{"account":"acc_1","amount":5}}`, tok.Token, op, subject))
	}
	for _, tt := range []struct{ op, subject string }{
		{"ledger.credit", "user-2"},
		{"ledger.debit", "user-1"},
		{"ledger.credit", ""},
		{"", "user-1"},
	} {
		wantProblem(t, spend(tt.op, tt.subject), http.StatusForbidden, "binding_mismatch")
	}
	if s, g := a.tokenState(tok.ID); s != token.Issued || g != 0 || a.balance("acme", "acc_1") != 0 {
		t.Fatalf("after mismatches: state %s gen %d balance %d; want issued, 0, 0", s, g, a.balance("acme", "acc_1"))
	}
	if res := spend("ledger.credit", "user-1"); res.status != http.StatusOK {
		t.Errorf("the right spend after mismatches = %d %s", res.status, res.body)
	}
}

func TestDebitInsufficientFundsIsStored(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tok := a.issue(key, "pay-1", `{"operation":"ledger.debit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":10}}`)
	spend := spendBody(tok, "ledger.debit", "user-1", `{"account":"acc_1","amount":10}`)

	first := a.post(key, "/v1/tokens/consume", spend)
	want := fmt.Sprintf(`{"token_id":"%s","state":"failed","result":{"code":"insufficient_funds","message":"the balance is lower than the amount","account":"acc_1","balance":0}}`, tok.ID)
	if first.status != http.StatusUnprocessableEntity || string(first.body) != want {
		t.Errorf("consume = %d %s\nwant 422 %s", first.status, first.body, want)
	}
	// Crediting the account now does not make the stored failure a success.
	credit := a.issue(key, "fund-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(key, "/v1/tokens/consume", spendBody(credit, "ledger.credit", "user-1", `{"account":"acc_1","amount":50}`)); res.status != http.StatusOK {
		t.Fatalf("credit = %d %s", res.status, res.body)
	}
	replay := a.post(key, "/v1/tokens/consume", spend)
	if replay.status != first.status || !bytes.Equal(replay.body, first.body) || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay = %d %s (replayed %q), want the stored 422", replay.status, replay.body, replay.header.Get("Idempotent-Replayed"))
	}
	if s, _ := a.tokenState(tok.ID); s != token.Failed || a.balance("acme", "acc_1") != 50 {
		t.Errorf("state %s, balance %d; want failed, 50", s, a.balance("acme", "acc_1"))
	}
}

func TestLeaseFlow(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: a.operator(), body: `{"mode":"lease","lease_seconds":600}`}); res.status != http.StatusOK {
		t.Fatalf("PUT operation = %d %s", res.status, res.body)
	}
	tok := a.issue(key, "checkout-1", `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	spend := fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, tok.Token)

	res := a.post(key, "/v1/tokens/consume", spend)
	var lease struct {
		TokenID        string `json:"token_id"`
		State          string `json:"state"`
		Generation     int64  `json:"generation"`
		LeaseExpiresAt string `json:"lease_expires_at"`
		OperationID    string `json:"operation_id"`
	}
	mustUnmarshal(t, res.body, &lease)
	if res.status != http.StatusAccepted || lease.TokenID != tok.ID || lease.State != "pending" || lease.Generation != 1 ||
		lease.LeaseExpiresAt == "" || lease.OperationID == "" {
		t.Fatalf("consume = %d %s, want 202 with a lease", res.status, res.body)
	}

	// While the lease runs, another spend is told to come back later.
	busy := a.post(key, "/v1/tokens/consume", spend)
	wantProblem(t, busy, http.StatusConflict, "in_progress")
	if s, err := strconv.Atoi(busy.header.Get("Retry-After")); err != nil || s < 1 || s > 600 {
		t.Errorf("Retry-After = %q, want the lease's remaining seconds", busy.header.Get("Retry-After"))
	}

	path := "/v1/tokens/" + tok.ID
	// Refused reports say why: the generation, or the field and reason.
	if p := wantProblem(t, a.post(key, path+"/complete", `{"generation":2,"result":{"charge":"ch_1"}}`), http.StatusConflict, "invalid_state"); !strings.Contains(p.Detail, "generation 2 was never granted") {
		t.Errorf("never granted: detail %q, want it to name the generation", p.Detail)
	}
	if p := wantProblem(t, a.post(key, path+"/complete", `{"generation":1,"status":500}`), http.StatusBadRequest, "invalid_request"); p.Field != "status" || p.Reason == "" {
		t.Errorf("status 500: field %q reason %q, want field status with a reason", p.Field, p.Reason)
	}
	if s, g := a.tokenState(tok.ID); s != token.Pending || g != 1 {
		t.Fatalf("after rejected reports: %s gen %d, want pending gen 1", s, g)
	}

	done := a.post(key, path+"/complete", `{"generation":1,"result":{"charge":"ch_1"}}`)
	want := fmt.Sprintf(`{"token_id":"%s","state":"consumed","generation":1,"status":200}`, tok.ID)
	if done.status != http.StatusOK || string(done.body) != want || done.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("complete = %d %s\nwant 200 %s", done.status, done.body, want)
	}
	if r := a.post(key, path+"/complete", `{"generation":1,"result":{"charge":"ch_1"}}`); r.status != http.StatusOK ||
		!bytes.Equal(r.body, done.body) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeated complete = %d %s (replayed %q), want the first answer replayed", r.status, r.body, r.header.Get("Idempotent-Replayed"))
	}
	stored := fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"charge":"ch_1"}}`, tok.ID)
	if r := a.post(key, "/v1/tokens/consume", spend); r.status != http.StatusOK || string(r.body) != stored || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("spend after complete = %d %s (replayed %q), want 200 %s replayed", r.status, r.body, r.header.Get("Idempotent-Replayed"), stored)
	}
	wantProblem(t, a.post(key, path+"/fail", `{"generation":1,"error":{"reason":"declined"}}`), http.StatusConflict, "report_conflict")
	wantProblem(t, a.post(key, path+"/complete", `{"generation":0}`), http.StatusConflict, "stale_generation")

	view := a.get(key, path)
	var v struct {
		State       string  `json:"state"`
		Generation  int64   `json:"generation"`
		OperationID *string `json:"operation_id"`
		FinishedAt  *string `json:"finished_at"`
	}
	if err := jsonLoose(view.body, &v); err != nil || v.State != "consumed" || v.Generation != 1 || v.OperationID == nil ||
		*v.OperationID != lease.OperationID || v.FinishedAt == nil {
		t.Errorf("GET token = %s (%v)", view.body, err)
	}
}

func TestLeaseFailAndUnknown(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: a.operator(), body: `{"mode":"lease"}`}); res.status != http.StatusOK {
		t.Fatalf("PUT operation = %d %s", res.status, res.body)
	}
	lease := func(intentID string) (id, spend string) {
		tok := a.issue(key, intentID, `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
		spend = fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, tok.Token)
		if res := a.post(key, "/v1/tokens/consume", spend); res.status != http.StatusAccepted {
			t.Fatalf("consume = %d %s", res.status, res.body)
		}
		return tok.ID, spend
	}

	failed, failedSpend := lease("checkout-1")
	res := a.post(key, "/v1/tokens/"+failed+"/fail", `{"generation":1,"status":402,"error":{"reason":"declined"}}`)
	want := fmt.Sprintf(`{"token_id":"%s","state":"failed","generation":1,"status":402}`, failed)
	if res.status != http.StatusOK || string(res.body) != want {
		t.Errorf("fail = %d %s\nwant 200 %s", res.status, res.body, want)
	}
	want = fmt.Sprintf(`{"token_id":"%s","state":"failed","error":{"reason":"declined"}}`, failed)
	if r := a.post(key, "/v1/tokens/consume", failedSpend); r.status != http.StatusPaymentRequired || string(r.body) != want {
		t.Errorf("consume after fail = %d %s, want the stored failure 402 %s", r.status, r.body, want)
	}

	unknown, unknownSpend := lease("checkout-2")
	res = a.post(key, "/v1/tokens/"+unknown+"/unknown", `{"generation":1}`)
	want = fmt.Sprintf(`{"token_id":"%s","state":"unknown","generation":1}`, unknown)
	if res.status != http.StatusOK || string(res.body) != want {
		t.Errorf("unknown = %d %s\nwant 200 %s", res.status, res.body, want)
	}
	wantProblem(t, a.post(key, "/v1/tokens/consume", unknownSpend), http.StatusConflict, "outcome_unknown")
	wantProblem(t, a.post(key, "/v1/tokens/"+unknown+"/complete", `{"generation":1}`), http.StatusConflict, "report_conflict")
	if s, _ := a.tokenState(unknown); s != token.Unknown {
		t.Errorf("state = %s, want unknown", s)
	}
}

// tokenRow is what a report may change, read straight from the database: the
// token's row and how many audit events it has.
func (a *api) tokenRow(id string) string {
	a.t.Helper()
	var row string
	err := a.pool.QueryRow(context.Background(), `
		SELECT concat_ws(' ', state, generation, result_status, encode(result_body, 'escape'),
		                 (SELECT count(*) FROM token_events WHERE token_id = $1))
		FROM tokens WHERE id = $1`, id).Scan(&row)
	if err != nil {
		a.t.Fatalf("token %s: %v", id, err)
	}
	return row
}

// A report whose answer was lost is sent again: the same 200, byte for byte,
// with Idempotent-Replayed: true, and nothing written twice. A different
// report for the same generation is 409 report_conflict and shows nothing of
// what was recorded.
func TestLeaseReportRepeatedAfterLostResponse(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	a.declareLease("acme")
	tests := []struct {
		name, path, first, same string
		want                    string // %s: the token id
		different               []string
	}{
		{
			name: "complete", path: "complete",
			first: `{"generation":1,"result":{"charge":"ch_1","amount":10}}`,
			same:  `{"generation":1,"status":200,"result":{ "amount":10.0, "charge":"ch_1" }}`,
			want:  `{"token_id":"%s","state":"consumed","generation":1,"status":200}`,
			different: []string{
				`{"generation":1,"result":{"charge":"ch_2","amount":10}}`,
				`{"generation":1,"status":201,"result":{"charge":"ch_1","amount":10}}`,
				`{"generation":1}`,
			},
		},
		{
			name: "fail", path: "fail",
			first: `{"generation":1,"status":402,"error":{"reason":"declined"}}`,
			same:  `{"status":402,"error":{"reason":"declined"},"generation":1}`,
			want:  `{"token_id":"%s","state":"failed","generation":1,"status":402}`,
			different: []string{
				`{"generation":1,"error":{"reason":"declined"}}`,
				`{"generation":1,"status":402,"error":{"reason":"stolen card"}}`,
			},
		},
		{
			name: "unknown", path: "unknown",
			first: `{"generation":1}`,
			same:  `{ "generation" : 1 }`,
			want:  `{"token_id":"%s","state":"unknown","generation":1}`,
		},
	}
	others := map[string]string{
		"complete": `{"generation":1,"result":{"charge":"ch_9"}}`,
		"fail":     `{"generation":1,"error":{"reason":"ch_9"}}`,
		"unknown":  `{"generation":1}`,
	}
	for _, tt := range tests {
		tok, _ := a.leased(key, "lost-"+tt.name)
		path := "/v1/tokens/" + tok.ID + "/"
		first := a.post(key, path+tt.path, tt.first)
		want := fmt.Sprintf(tt.want, tok.ID)
		if first.status != http.StatusOK || string(first.body) != want || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%s = %d %s, want 200 %s", tt.name, first.status, first.body, want)
		}
		recorded := a.tokenRow(tok.ID)
		for _, body := range []string{tt.first, tt.same, tt.first} {
			r := a.post(key, path+tt.path, body)
			if r.status != http.StatusOK || !bytes.Equal(r.body, first.body) || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s repeated as %s = %d %s (replayed %q), want the first answer replayed", tt.name, body, r.status, r.body, r.header.Get("Idempotent-Replayed"))
			}
		}
		var different []response
		for _, body := range tt.different {
			different = append(different, a.post(key, path+tt.path, body))
		}
		for other, body := range others {
			if other != tt.path {
				different = append(different, a.post(key, path+other, body))
			}
		}
		for _, r := range different {
			p := wantProblem(t, r, http.StatusConflict, "report_conflict")
			if strings.Contains(p.Detail, "declined") || strings.Contains(p.Detail, "ch_1") {
				t.Errorf("%s: a conflicting report was shown the stored outcome: %s", tt.name, r.body)
			}
		}
		if got := a.tokenRow(tok.ID); got != recorded {
			t.Errorf("%s: after the repeats the token is %q, want %q as first recorded", tt.name, got, recorded)
		}
	}
}

// A report on a token never leased (an atomic token, or a lease-mode token
// still issued) or quoting a generation never granted is 409 invalid_state,
// changes nothing and shows no stored outcome: the token id is a public
// handle.
func TestLeaseReportNeverLeased(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	a.declareLease("acme")
	spent := a.credit(key, "credit-1", "user-1", true) // consumed, its balance stored
	issuedTok := a.issue(key, "pay-issued", `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	leasedTok, gen := a.leased(key, "pay-leased")
	for _, tc := range []struct {
		id  string
		gen int64
	}{
		{spent.ID, 0}, {spent.ID, 1},
		{issuedTok.ID, 0}, {issuedTok.ID, 1},
		{leasedTok.ID, gen + 1},
	} {
		before := a.tokenRow(tc.id)
		for _, report := range []struct{ path, body string }{
			{"complete", `{"generation":%d}`},
			{"complete", `{"generation":%d,"result":{"account":"acc_1","balance":1}}`},
			{"fail", `{"generation":%d,"error":{"reason":"x"}}`},
			{"unknown", `{"generation":%d}`},
		} {
			r := a.post(key, "/v1/tokens/"+tc.id+"/"+report.path, fmt.Sprintf(report.body, tc.gen))
			wantProblem(t, r, http.StatusConflict, "invalid_state")
			if bytes.Contains(r.body, []byte("balance")) || bytes.Contains(r.body, []byte("result")) || r.header.Get("Idempotent-Replayed") != "" {
				t.Errorf("%s on %s generation %d showed an outcome: %s", report.path, tc.id, tc.gen, r.body)
			}
		}
		if got := a.tokenRow(tc.id); got != before {
			t.Errorf("reports on %s generation %d changed it: %q, was %q", tc.id, tc.gen, got, before)
		}
	}
}

// Statuses that cannot carry a body are refused with 400 when reported or
// reconciled: a stored outcome is replayed with its body, byte for byte.
func TestOutcomeStatusWithoutBodyRefused(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	a.declareLease("acme")
	leasedTok, gen := a.leased(key, "pay-leased")
	unknownTok, _ := a.unknown(key, "pay-unknown")
	leasedBefore, unknownBefore := a.tokenRow(leasedTok.ID), a.tokenRow(unknownTok.ID)
	for _, status := range []int{100, 101, 103, 204, 205, 304} {
		for _, r := range []response{
			a.post(key, "/v1/tokens/"+leasedTok.ID+"/complete", fmt.Sprintf(`{"generation":%d,"status":%d,"result":{"k":"v"}}`, gen, status)),
			a.post(key, "/v1/tokens/"+leasedTok.ID+"/fail", fmt.Sprintf(`{"generation":%d,"status":%d,"error":{"k":"v"}}`, gen, status)),
			a.post(op, "/v1/admin/tokens/"+unknownTok.ID+"/reconcile", fmt.Sprintf(`{"outcome":"succeeded","status":%d,"result":{"k":"v"}}`, status)),
			a.post(op, "/v1/admin/tokens/"+unknownTok.ID+"/reconcile", fmt.Sprintf(`{"outcome":"failed","status":%d,"result":{"k":"v"}}`, status)),
		} {
			p := wantProblem(t, r, http.StatusBadRequest, "invalid_request")
			if !strings.Contains(p.Detail, strconv.Itoa(status)) {
				t.Errorf("status %d refused with detail %q, want it named", status, p.Detail)
			}
		}
	}
	if got := a.tokenRow(leasedTok.ID); got != leasedBefore {
		t.Errorf("refused reports changed the token: %q, was %q", got, leasedBefore)
	}
	if got := a.tokenRow(unknownTok.ID); got != unknownBefore {
		t.Errorf("refused reconciles changed the token: %q, was %q", got, unknownBefore)
	}
}
