package httpapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func (a *api) putOperation(name, body string) response {
	a.t.Helper()
	return a.do(request{method: http.MethodPut, path: "/v1/admin/operations/" + name, key: a.operator(), body: body})
}

func (a *api) deleteOperation(name string) response {
	a.t.Helper()
	return a.do(request{method: http.MethodDelete, path: "/v1/admin/operations/" + name, key: a.operator()})
}

// A declaration no spend could run is refused when it is made, and changes
// nothing; an omitted mode is the one the server can run.
func TestDeclareRefusesWhatCannotRun(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	tests := []struct {
		name, op, body string
		status         int
		code, mode     string // code of the refusal, or the mode declared
	}{
		{"atomic without a handler", "shop.order", `{"mode":"atomic"}`, 400, "operation_not_runnable", ""},
		{"atomic without a handler, full policy", "shop.refund", `{"mode":"atomic","max_ttl_seconds":60,"ignored_fields":["trace_id"]}`, 400, "operation_not_runnable", ""},
		{"built-in into lease", "ledger.credit", `{"mode":"lease"}`, 409, "builtin_operation", ""},
		{"built-in into lease with takeover", "ledger.debit", `{"mode":"lease","on_lease_expiry":"takeover","lease_seconds":10}`, 409, "builtin_operation", ""},
		{"omitted mode without a handler", "shop.ship", `{"max_ttl_seconds":60}`, 200, "", "lease"},
		{"omitted mode, empty body", "shop.pack", `{}`, 200, "", "lease"},
		{"omitted mode of a built-in", "ledger.debit", `{"max_ttl_seconds":600}`, 200, "", "atomic"},
		{"built-in in its own mode", "ledger.credit", `{"mode":"atomic","max_ttl_seconds":600}`, 200, "", "atomic"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before int
			if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM operations WHERE name = $1`, tc.op).Scan(&before); err != nil {
				t.Fatal(err)
			}
			res := a.putOperation(tc.op, tc.body)
			if tc.code != "" {
				wantProblem(t, res, tc.status, tc.code)
				var after int
				if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM operations WHERE name = $1`, tc.op).Scan(&after); err != nil || after != before {
					t.Errorf("refused PUT changed the declarations: %d rows, was %d (%v)", after, before, err)
				}
				return
			}
			var got struct{ Mode string }
			if res.status != tc.status || jsonLoose(res.body, &got) != nil || got.Mode != tc.mode {
				t.Fatalf("PUT %s = %d %s, want %d with mode %s", tc.body, res.status, res.body, tc.status, tc.mode)
			}
		})
	}
	// The refused redeclaration left ledger.credit crediting.
	tok := a.issue(a.client(), "credit-1", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"account":"acc","amount":4}}`)
	res := a.post(a.client(), "/v1/tokens/consume", spendBody(tok, "ledger.credit", "u", `{"account":"acc","amount":4}`))
	if res.status != http.StatusOK || a.balance("acme", "acc") != 4 {
		t.Fatalf("credit after the refused redeclaration = %d %s, balance %d; want 200 and 4", res.status, res.body, a.balance("acme", "acc"))
	}
}

// DELETE removes a declaration nothing needs any more, and only that.
func TestDeleteOperation(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	wantProblem(t, a.deleteOperation("ledger.credit"), http.StatusConflict, "builtin_operation")
	a.putOperation("ledger.debit", `{"max_ttl_seconds":60}`) // an override is still a built-in
	wantProblem(t, a.deleteOperation("ledger.debit"), http.StatusConflict, "builtin_operation")
	wantProblem(t, a.deleteOperation("never.declared"), http.StatusNotFound, "unknown_operation")
	if res := a.do(request{method: http.MethodDelete, path: "/v1/admin/operations/pay.card", key: key}); res.status != http.StatusForbidden {
		t.Errorf("DELETE with a client key = %d, want 403", res.status)
	}

	if res := a.putOperation("pay.card", `{"mode":"lease","lease_seconds":600}`); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}
	issueBody := `{"operation":"pay.card","subject":"u","ttl_seconds":300,"payload":{"order":1}}`
	tok := a.issue(key, "order-1", issueBody)
	spend := spendBody(tok, "pay.card", "u", `{"order":1}`)
	declared := func() bool {
		var n int
		if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM operations WHERE tenant_id = 'acme' AND name = 'pay.card'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	// issued, then pending: refused, and the declaration stays.
	wantProblem(t, a.deleteOperation("pay.card"), http.StatusConflict, "operation_in_use")
	lease := a.post(key, "/v1/tokens/consume", spend)
	var granted struct{ Generation int64 }
	if lease.status != http.StatusAccepted || jsonLoose(lease.body, &granted) != nil {
		t.Fatalf("spend = %d %s, want a lease", lease.status, lease.body)
	}
	wantProblem(t, a.deleteOperation("pay.card"), http.StatusConflict, "operation_in_use")
	// unknown: refused too.
	a.exec(`UPDATE tokens SET state = 'unknown', lease_expires_at = NULL WHERE id = $1`, tok.ID)
	wantProblem(t, a.deleteOperation("pay.card"), http.StatusConflict, "operation_in_use")
	if !declared() {
		t.Fatal("a refused DELETE removed the declaration")
	}
	// An issued token already past its expiry needs nothing.
	// The body a spend stores: later spends replay it, and it must be what the contract says.
	stored := `{"token_id":"` + tok.ID + `","state":"consumed","result":{"done":true}}`
	a.exec(`UPDATE tokens SET state = 'consumed', result_status = 200, result_body = convert_to($2, 'UTF8'), finished_at = now() WHERE id = $1`, tok.ID, stored)
	old := a.issue(key, "order-2", `{"operation":"pay.card","subject":"u","ttl_seconds":300}`)
	a.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, old.ID)

	res := a.deleteOperation("pay.card")
	var deleted struct{ Name, Mode string }
	if res.status != http.StatusOK || jsonLoose(res.body, &deleted) != nil || deleted.Name != "pay.card" || deleted.Mode != "lease" {
		t.Fatalf("DELETE = %d %s, want 200 with the deleted policy", res.status, res.body)
	}
	if declared() {
		t.Fatal("DELETE answered 200 and left the declaration")
	}
	wantProblem(t, a.get(a.operator(), "/v1/admin/operations/pay.card"), http.StatusNotFound, "unknown_operation")
	wantProblem(t, a.deleteOperation("pay.card"), http.StatusNotFound, "unknown_operation")

	// The finished token keeps its policy: its outcome still replays, and a
	// retry of its issue still gets it. A new intent is refused.
	if res := a.post(key, "/v1/tokens/consume", spend); res.status != http.StatusOK || string(res.body) != stored || res.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("re-spend after DELETE = %d %s, want the stored outcome replayed", res.status, res.body)
	}
	if res := a.issueRaw("order-1", issueBody); res.status != http.StatusCreated || !strings.Contains(string(res.body), tok.ID) {
		t.Errorf("issue retry after DELETE = %d %s, want the token replayed", res.status, res.body)
	}
	wantProblem(t, a.issueRaw("order-3", issueBody), http.StatusBadRequest, "unknown_operation")
}

// Redeclaring an operation governs the tokens issued afterwards; a token
// already issued keeps its binding, lease length, expiry policy and
// retention.
func TestTokenKeepsPolicyItWasIssuedUnder(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()

	t.Run("lease mode", func(t *testing.T) {
		if res := a.putOperation("pay.card", `{"mode":"lease","lease_seconds":600,"on_lease_expiry":"takeover","retention_seconds":100}`); res.status != http.StatusOK {
			t.Fatalf("PUT = %d %s", res.status, res.body)
		}
		body := `{"operation":"pay.card","subject":"u","ttl_seconds":300,"payload":{"order":7,"trace_id":"a"}}`
		tok := a.issue(key, "lease-1", body)
		if res := a.putOperation("pay.card", `{"mode":"lease","lease_seconds":5,"on_lease_expiry":"unknown","retention_seconds":7,"max_ttl_seconds":60,"ignored_fields":["trace_id"]}`); res.status != http.StatusOK {
			t.Fatalf("re-PUT = %d %s", res.status, res.body)
		}

		// A byte-identical retry replays, though the payload's digest and the
		// maximum ttl are different under the new policy.
		retry := a.issueRaw("lease-1", body)
		if retry.status != http.StatusCreated || retry.header.Get("Idempotent-Replayed") != "true" || string(retry.body) != string(tok.raw.body) {
			t.Fatalf("retry = %d %s, want the first answer replayed", retry.status, retry.body)
		}
		// A spend with the exact issued payload passes, with the lease length
		// of the time.
		spend := spendBody(tok, "pay.card", "u", `{"order":7,"trace_id":"a"}`)
		if res := a.post(key, "/v1/tokens/consume", spend); res.status != http.StatusAccepted {
			t.Fatalf("spend = %d %s, want 202", res.status, res.body)
		}
		var long bool
		if err := a.pool.QueryRow(t.Context(), `SELECT lease_expires_at > now() + interval '500 seconds' FROM tokens WHERE id = $1`, tok.ID).Scan(&long); err != nil || !long {
			t.Errorf("lease shorter than the 600 s the token was issued under (%v)", err)
		}
		// Its lease lapses: the sweeper leaves it for takeover, and the next
		// spend takes over, as the policy of the time says.
		a.exec(`UPDATE tokens SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, tok.ID)
		if res := a.post(a.operator(), "/v1/admin/purge", `{}`); res.status != http.StatusOK {
			t.Fatalf("purge = %d %s", res.status, res.body)
		}
		if s, _ := a.tokenState(tok.ID); s != "pending" {
			t.Errorf("after a sweep the token is %s, want pending (takeover)", s)
		}
		res := a.post(key, "/v1/tokens/consume", spend)
		var takeover struct{ Generation int64 }
		if res.status != http.StatusAccepted || jsonLoose(res.body, &takeover) != nil || takeover.Generation != 2 {
			t.Errorf("spend after the lease lapsed = %d %s, want a takeover at generation 2", res.status, res.body)
		}
		var retention int
		if err := a.pool.QueryRow(t.Context(), `SELECT retention_seconds FROM tokens WHERE id = $1`, tok.ID).Scan(&retention); err != nil || retention != 100 {
			t.Errorf("retention_seconds = %d, %v; want 100", retention, err)
		}

		// A token issued now follows the new policy: trace_id is ignored.
		next := a.issue(key, "lease-2", `{"operation":"pay.card","subject":"u","ttl_seconds":60,"payload":{"order":8,"trace_id":"a"}}`)
		if res := a.post(key, "/v1/tokens/consume", spendBody(next, "pay.card", "u", `{"order":8,"trace_id":"b"}`)); res.status != http.StatusAccepted {
			t.Errorf("spend of a token issued after the redeclaration = %d %s, want 202", res.status, res.body)
		}
	})

	t.Run("atomic built-in", func(t *testing.T) {
		// Issued under the built-in policy, which ignores trace_id.
		body := `{"operation":"ledger.credit","subject":"u","ttl_seconds":300,"payload":{"account":"keep","amount":5,"trace_id":"a"}}`
		tok := a.issue(key, "credit-1", body)
		if res := a.putOperation("ledger.credit", `{"mode":"atomic","ignored_fields":[]}`); res.status != http.StatusOK {
			t.Fatalf("re-PUT = %d %s", res.status, res.body)
		}
		if retry := a.issueRaw("credit-1", body); retry.status != http.StatusCreated || string(retry.body) != string(tok.raw.body) {
			t.Fatalf("retry = %d %s, want the first answer replayed", retry.status, retry.body)
		}
		spend := func(tok issued, trace string) response {
			return a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"u","payload":{"account":"keep","amount":5,"trace_id":%q}}`, tok.Token, trace))
		}
		if res := spend(tok, "b"); res.status != http.StatusOK || a.balance("acme", "keep") != 5 {
			t.Fatalf("spend with another trace_id = %d %s, balance %d; want 200 and 5 (trace_id was ignored at issue)", res.status, res.body, a.balance("acme", "keep"))
		}
		next := a.issue(key, "credit-2", body)
		wantProblem(t, spend(next, "b"), http.StatusUnprocessableEntity, "payload_mismatch")
		if res := spend(next, "a"); res.status != http.StatusOK || a.balance("acme", "keep") != 10 {
			t.Errorf("spend with the issued payload = %d %s, balance %d; want 200 and 10", res.status, res.body, a.balance("acme", "keep"))
		}
	})
}

// An operation name Postgres cannot store is refused on every operation route
// and on issue, never a 5xx.
func TestOperationRoutesRefuseUnstorableNames(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, name := range []string{"pay%00card", "pay.%FFcard"} {
		wantProblem(t, a.get(a.operator(), "/v1/admin/operations/"+name), http.StatusBadRequest, "invalid_request")
		wantProblem(t, a.deleteOperation(name), http.StatusBadRequest, "invalid_request")
		if res := a.putOperation(name, `{"mode":"lease"}`); res.status != http.StatusBadRequest {
			t.Errorf("PUT %s = %d %s, want 400", name, res.status, res.body)
		}
	}
	res := a.issueRaw("nul", `{"operation":"pay\u0000card","subject":"u","ttl_seconds":60}`)
	if res.status != http.StatusBadRequest {
		t.Errorf("issue with a NUL in the operation = %d %s, want 400", res.status, res.body)
	}
}

func TestOperationsAdmin(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	op := a.operator()

	put := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op,
		body: `{"mode":"lease","on_lease_expiry":"takeover","lease_seconds":60,"ignored_fields":["trace_id"]}`})
	want := `{"name":"pay.card","mode":"lease","on_lease_expiry":"takeover","lease_seconds":60,"max_ttl_seconds":3600,"retention_seconds":86400,"ignored_fields":["trace_id"],"event_outcome":false}`
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
