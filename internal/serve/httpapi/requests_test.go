package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/token"
)

// TestRejectsBadRequests: malformed or invalid input is answered 4xx with the
// reason, and changes no token, no balance and no declaration.
func TestRejectsBadRequests(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()

	// An unbound credit token, so a bad payload reaches the ledger's handler,
	// and an account with a balance to keep.
	victim := a.issue(key, "victim", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	funding := a.issue(key, "funding", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":{"account":"acc_1","amount":50}}`, funding.Token)); res.status != http.StatusOK {
		t.Fatalf("funding = %d %s", res.status, res.body)
	}
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op, body: `{"mode":"lease"}`}); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}
	leased := a.issue(key, "leased", `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, leased.Token)); res.status != http.StatusAccepted {
		t.Fatalf("lease = %d %s", res.status, res.body)
	}
	tokensBefore := a.count("tokens")

	consume := func(payload string) string {
		return fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":%s}`, victim.Token, payload)
	}
	huge := consume(fmt.Sprintf(`{"account":"acc_1","amount":5,"trace_id":%q}`, strings.Repeat("x", httpapi.DefaultMaxBodyBytes)))
	issueHeader := http.Header{"Idempotency-Key": {"bad-issue"}}

	tests := []struct {
		name         string
		method, path string
		key, body    string
		header       http.Header
		chunked      bool // no Content-Length: the limit is found while reading
		status       int
		code         string
		detail       string // a part of the detail
	}{
		{"consume: malformed JSON", "POST", "/v1/tokens/consume", key, `{"token":`, nil, false, 400, "invalid_request", "ends early"},
		{"consume: syntax error", "POST", "/v1/tokens/consume", key, `{"token" "x"}`, nil, false, 400, "invalid_request", "malformed JSON"},
		{"consume: unknown field", "POST", "/v1/tokens/consume", key, strings.Replace(consume(`{"account":"acc_1","amount":5}`), `"subject"`, `"amount":5,"subject"`, 1), nil, false, 400, "invalid_request", `unknown field "amount"`},
		{"consume: tenant in body", "POST", "/v1/tokens/consume", key, strings.Replace(consume(`{"account":"acc_1","amount":5}`), `{"token"`, `{"tenant":"globex","token"`, 1), nil, false, 400, "invalid_request", `unknown field "tenant"`},
		{"consume: trailing data", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":5}`) + ` {}`, nil, false, 400, "invalid_request", "after the JSON value"},
		{"consume: trailing brace", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":5}`) + `}`, nil, false, 400, "invalid_request", "after the JSON value"},
		{"consume: subject of wrong type", "POST", "/v1/tokens/consume", key, fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":5}`, victim.Token), nil, false, 400, "invalid_request", `field "subject" must be a string`},
		{"consume: body is an array", "POST", "/v1/tokens/consume", key, `[]`, nil, false, 400, "invalid_request", "JSON object"},
		{"consume: empty body", "POST", "/v1/tokens/consume", key, ``, nil, false, 400, "invalid_request", "JSON object"},
		{"consume: negative amount", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":-5}`), nil, false, 400, "invalid_request", "amount must be"},
		{"consume: zero amount", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":0}`), nil, false, 400, "invalid_request", "amount must be"},
		{"consume: amount as string", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":"5"}`), nil, false, 400, "invalid_request", "amount"},
		{"consume: fractional amount", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":5.5}`), nil, false, 400, "invalid_request", "amount"},
		{"consume: unknown payload field", "POST", "/v1/tokens/consume", key, consume(`{"account":"acc_1","amount":5,"memo":"x"}`), nil, false, 400, "invalid_request", "memo"},
		{"consume: no payload", "POST", "/v1/tokens/consume", key, fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1"}`, victim.Token), nil, false, 400, "invalid_request", "invalid payload"},
		{"consume: malformed token", "POST", "/v1/tokens/consume", key, `{"token":"tks_abc","operation":"ledger.credit","subject":"user-1"}`, nil, false, 400, "invalid_request", "token"},
		{"consume: oversized", "POST", "/v1/tokens/consume", key, huge, nil, false, 413, "payload_too_large", "65536"},
		{"consume: oversized, chunked", "POST", "/v1/tokens/consume", key, huge, nil, true, 413, "payload_too_large", "65536"},
		{"issue: ttl as string", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","subject":"u","ttl_seconds":"60"}`, issueHeader, false, 400, "invalid_request", `field "ttl_seconds" must be an integer`},
		{"issue: fractional ttl", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","subject":"u","ttl_seconds":1.5}`, issueHeader, false, 400, "invalid_request", `"ttl_seconds"`},
		{"issue: negative ttl", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","subject":"u","ttl_seconds":-1}`, issueHeader, false, 400, "invalid_request", "ttl_seconds"},
		{"issue: ttl over the maximum", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","subject":"u","ttl_seconds":86400}`, issueHeader, false, 400, "invalid_request", "maximum"},
		{"issue: no subject", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","ttl_seconds":60}`, issueHeader, false, 400, "invalid_request", "subject"},
		{"issue: unknown operation", "POST", "/v1/tokens", key, `{"operation":"nope","subject":"u","ttl_seconds":60}`, issueHeader, false, 400, "unknown_operation", `"nope"`},
		{"issue: duplicate payload key", "POST", "/v1/tokens", key, `{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"a":1,"a":2}}`, issueHeader, false, 400, "invalid_request", "payload"},
		{"issue: oversized", "POST", "/v1/tokens", key, fmt.Sprintf(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":%q}`, strings.Repeat("x", httpapi.DefaultMaxBodyBytes)), issueHeader, false, 413, "payload_too_large", ""},
		{"complete: no generation", "POST", "/v1/tokens/" + leased.ID + "/complete", key, `{"result":{}}`, nil, false, 400, "invalid_request", "generation"},
		{"complete: generation as string", "POST", "/v1/tokens/" + leased.ID + "/complete", key, `{"generation":"1"}`, nil, false, 400, "invalid_request", `field "generation" must be an integer`},
		{"complete: error field", "POST", "/v1/tokens/" + leased.ID + "/complete", key, `{"generation":1,"error":{}}`, nil, false, 400, "invalid_request", `unknown field "error"`},
		{"complete: 4xx status", "POST", "/v1/tokens/" + leased.ID + "/complete", key, `{"generation":1,"status":404}`, nil, false, 400, "invalid_request", "2xx"},
		{"fail: 2xx status", "POST", "/v1/tokens/" + leased.ID + "/fail", key, `{"generation":1,"status":200}`, nil, false, 400, "invalid_request", "4xx or 5xx"},
		{"unknown: result field", "POST", "/v1/tokens/" + leased.ID + "/unknown", key, `{"generation":1,"result":{}}`, nil, false, 400, "invalid_request", `unknown field "result"`},
		{"operation: bad mode", "PUT", "/v1/admin/operations/pay.card", op, `{"mode":"eventually"}`, nil, false, 400, "invalid_request", "mode"},
		{"operation: bad name", "PUT", "/v1/admin/operations/Pay.Card", op, `{"mode":"lease"}`, nil, false, 400, "invalid_request", "name"},
		{"operation: unknown field", "PUT", "/v1/admin/operations/pay.card", op, `{"mode":"lease","tenant":"globex"}`, nil, false, 400, "invalid_request", `unknown field "tenant"`},
		{"operation: wrong type", "PUT", "/v1/admin/operations/pay.card", op, `{"ignored_fields":"trace_id"}`, nil, false, 400, "invalid_request", `field "ignored_fields" must be an array`},
		{"account: bad name", "GET", "/v1/ledger/accounts/" + strings.Repeat("a", 65), key, ``, nil, false, 400, "invalid_request", "account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var res response
			if tt.chunked {
				req := httptest.NewRequest(tt.method, tt.path, io.MultiReader(strings.NewReader(tt.body)))
				req.ContentLength = -1
				req.Header.Set("Authorization", "Bearer "+tt.key)
				rec := httptest.NewRecorder()
				a.handler.ServeHTTP(rec, req)
				res = response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
			} else {
				res = a.do(request{method: tt.method, path: tt.path, key: tt.key, body: tt.body, header: tt.header})
			}
			p := wantProblem(t, res, tt.status, tt.code)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to mention %q", p.Detail, tt.detail)
			}
		})
	}

	if s, g := a.tokenState(victim.ID); s != token.Issued || g != 0 {
		t.Errorf("victim token is %s gen %d, want issued gen 0", s, g)
	}
	if s, g := a.tokenState(leased.ID); s != token.Pending || g != 1 {
		t.Errorf("leased token is %s gen %d, want pending gen 1", s, g)
	}
	if b := a.balance("acme", "acc_1"); b != 50 {
		t.Errorf("balance = %d, want 50", b)
	}
	if n := a.count("ledger_entries"); n != 1 {
		t.Errorf("%d ledger entries, want 1", n)
	}
	if n := a.count("tokens"); n != tokensBefore {
		t.Errorf("%d tokens, want %d: a rejected issue wrote one", n, tokensBefore)
	}
	var mode string
	if err := a.pool.QueryRow(t.Context(), `SELECT mode FROM operations WHERE tenant_id = 'acme' AND name = 'pay.card'`).Scan(&mode); err != nil || mode != "lease" || a.count("operations") != 1 {
		t.Errorf("operations changed: pay.card mode %q (%v), %d declared", mode, err, a.count("operations"))
	}

	// After all that, the victim token still spends.
	if res := a.post(key, "/v1/tokens/consume", consume(`{"account":"acc_1","amount":5}`)); res.status != http.StatusOK {
		t.Errorf("valid spend after rejections = %d %s", res.status, res.body)
	}
}
