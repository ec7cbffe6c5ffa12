package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/tokend/tokend/token"
)

func TestOperationsAdmin(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	op := a.operator()

	put := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op,
		body: `{"mode":"lease","on_lease_expiry":"takeover","lease_seconds":60,"ignored_fields":["trace_id"]}`})
	want := `{"name":"pay.card","mode":"lease","on_lease_expiry":"takeover","lease_seconds":60,"max_ttl_seconds":3600,"retention_seconds":86400,"ignored_fields":["trace_id"]}`
	if put.status != http.StatusOK || string(put.body) != want {
		t.Errorf("PUT = %d %s\nwant 200 %s", put.status, put.body, want)
	}
	if got := a.get(op, "/v1/admin/operations/pay.card"); got.status != http.StatusOK || !bytes.Equal(got.body, put.body) {
		t.Errorf("GET = %d %s, want the PUT's answer", got.status, got.body)
	}
	list := a.get(op, "/v1/admin/operations")
	var items struct {
		Items []struct{ Name, Mode string } `json:"items"`
	}
	if err := jsonLoose(list.body, &items); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range items.Items {
		names = append(names, it.Name+"/"+it.Mode)
	}
	if list.status != http.StatusOK || fmt.Sprint(names) != "[ledger.credit/atomic ledger.debit/atomic pay.card/lease]" {
		t.Errorf("list = %d %v", list.status, names)
	}
	wantProblem(t, a.get(op, "/v1/admin/operations/never.declared"), http.StatusNotFound, "unknown_operation")

	// Redeclaring replaces the policy.
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op, body: `{"mode":"lease","max_ttl_seconds":60}`}); res.status != http.StatusOK {
		t.Fatalf("re-PUT = %d %s", res.status, res.body)
	}
	var (
		expiry string
		maxTTL int
	)
	if err := a.pool.QueryRow(t.Context(), `SELECT on_lease_expiry, max_ttl_seconds FROM operations WHERE tenant_id = 'acme' AND name = 'pay.card'`).Scan(&expiry, &maxTTL); err != nil || expiry != "unknown" || maxTTL != 60 {
		t.Errorf("stored on_lease_expiry, max_ttl_seconds = %q, %d, %v; want unknown, 60", expiry, maxTTL, err)
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
	wantProblem(t, a.post(key, path+"/complete", `{"generation":2,"result":{"charge":"ch_1"}}`), http.StatusConflict, "stale_generation")
	wantProblem(t, a.post(key, path+"/complete", `{"generation":1,"status":500}`), http.StatusBadRequest, "invalid_request")
	if s, g := a.tokenState(tok.ID); s != token.Pending || g != 1 {
		t.Fatalf("after rejected reports: %s gen %d, want pending gen 1", s, g)
	}

	done := a.post(key, path+"/complete", `{"generation":1,"result":{"charge":"ch_1"}}`)
	want := fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"charge":"ch_1"}}`, tok.ID)
	if done.status != http.StatusOK || string(done.body) != want {
		t.Errorf("complete = %d %s\nwant 200 %s", done.status, done.body, want)
	}
	for _, r := range []response{
		a.post(key, path+"/complete", `{"generation":1,"result":{"charge":"ch_1"}}`),
		a.post(key, "/v1/tokens/consume", spend),
	} {
		if r.status != http.StatusOK || !bytes.Equal(r.body, done.body) || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay = %d %s (replayed %q), want the completion", r.status, r.body, r.header.Get("Idempotent-Replayed"))
		}
	}
	wantProblem(t, a.post(key, path+"/fail", `{"generation":1,"error":{"reason":"declined"}}`), http.StatusConflict, "invalid_state")
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
	want := fmt.Sprintf(`{"token_id":"%s","state":"failed","error":{"reason":"declined"}}`, failed)
	if res.status != http.StatusPaymentRequired || string(res.body) != want {
		t.Errorf("fail = %d %s\nwant 402 %s", res.status, res.body, want)
	}
	if r := a.post(key, "/v1/tokens/consume", failedSpend); r.status != http.StatusPaymentRequired || !bytes.Equal(r.body, res.body) {
		t.Errorf("consume after fail = %d %s, want the stored failure", r.status, r.body)
	}

	unknown, unknownSpend := lease("checkout-2")
	res = a.post(key, "/v1/tokens/"+unknown+"/unknown", `{"generation":1}`)
	want = fmt.Sprintf(`{"token_id":"%s","state":"unknown","generation":1}`, unknown)
	if res.status != http.StatusOK || string(res.body) != want {
		t.Errorf("unknown = %d %s\nwant 200 %s", res.status, res.body, want)
	}
	wantProblem(t, a.post(key, "/v1/tokens/consume", unknownSpend), http.StatusConflict, "outcome_unknown")
	wantProblem(t, a.post(key, "/v1/tokens/"+unknown+"/complete", `{"generation":1}`), http.StatusConflict, "outcome_unknown")
	if s, _ := a.tokenState(unknown); s != token.Unknown {
		t.Errorf("state = %s, want unknown", s)
	}
}
