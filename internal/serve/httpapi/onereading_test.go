package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/jsonread"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/token"
)

// TestOneReadingOfEveryBody: every JSON body, envelope and payload, is read
// one way. A member given twice (at the top or nested, in the payload or in
// a result), a case variant of a field, invalid UTF-8, a lone surrogate or a
// payload number a double does not hold is answered 400 invalid_request and
// changes nothing.
func TestOneReadingOfEveryBody(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op, body: `{"mode":"lease"}`}); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}
	victim := a.issue(key, "victim", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	leased := a.issue(key, "leased", `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	if res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, leased.Token)); res.status != http.StatusAccepted {
		t.Fatalf("lease = %d %s", res.status, res.body)
	}
	revocable := a.issue(key, "revocable", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`)
	tokensBefore := a.count("tokens")

	issue := func(body string) request {
		return request{method: http.MethodPost, path: "/v1/tokens", key: key, body: body, header: http.Header{"Idempotency-Key": {"one-reading"}}}
	}
	spend := func(tail string) request {
		return request{method: http.MethodPost, path: "/v1/tokens/consume", key: key,
			body: fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1",%s}`, victim.Token, tail)}
	}
	post := func(k, path, body string) request {
		return request{method: http.MethodPost, path: path, key: k, body: body}
	}
	tests := []struct {
		name   string
		req    request
		detail string // a part of the detail
	}{
		{"issue: operation twice", issue(`{"operation":"pay.card","subject":"u","ttl_seconds":60,"operation":"ledger.credit"}`), `duplicate member "operation"`},
		{"issue: case variant", issue(`{"operation":"ledger.credit","Subject":"u","subject":"v","ttl_seconds":60}`), `unknown field "Subject"`},
		{"issue: payload member twice", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"account":"a","amount":1,"amount":1000}}`), `duplicate member "amount" in "payload"`},
		{"issue: nested payload member twice", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"meta":[{"k":1,"k":2}]}}`), `duplicate member "k" in "payload.meta.0"`},
		{"issue: 2^53+1 in payload", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"order_id":9007199254740993}}`), `9007199254740993 in "payload.order_id"`},
		{"issue: 1e400 in payload", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"n":1e400}}`), "out of the range"},
		{"issue: 1e-400 in payload", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":[1e-400]}`), "not exactly"},
		{"issue: lone surrogate in payload", issue(`{"operation":"ledger.credit","subject":"u","ttl_seconds":60,"payload":{"note":"\ud800"}}`), `"payload.note"`},
		{"issue: invalid UTF-8 in payload", issue("{\"operation\":\"ledger.credit\",\"subject\":\"u\",\"ttl_seconds\":60,\"payload\":{\"note\":\"\xff\"}}"), "not valid UTF-8"},
		{"issue: lone surrogate in subject", issue(`{"operation":"ledger.credit","subject":"\udc00","ttl_seconds":60}`), `"subject"`},
		{"issue: null body", issue(`null`), "JSON object"},
		{"consume: token twice", spend(fmt.Sprintf(`"token":%q,"payload":{"account":"acc_1","amount":5}`, revocable.Token)), `duplicate member "token"`},
		{"consume: payload member twice", spend(`"payload":{"account":"acc_1","amount":5,"amount":500}`), `duplicate member "amount" in "payload"`},
		{"consume: case variant in payload", spend(`"payload":{"account":"acc_1","amount":5,"Amount":500}`), `payload.Amount is not a field`},
		{"consume: 2^53+1 in payload", spend(`"payload":{"account":"acc_1","amount":5,"trace_id":9007199254740993}`), "not exactly"},
		{"complete: generation twice", post(key, "/v1/tokens/"+leased.ID+"/complete", `{"generation":1,"status":200,"generation":2}`), `duplicate member "generation"`},
		{"complete: nested result member twice", post(key, "/v1/tokens/"+leased.ID+"/complete", `{"generation":1,"status":200,"result":{"a":{"b":1,"b":2}}}`), `duplicate member "b" in "result.a"`},
		{"fail: case variant", post(key, "/v1/tokens/"+leased.ID+"/fail", `{"generation":1,"Status":500}`), `unknown field "Status"`},
		{"unknown: generation twice", post(key, "/v1/tokens/"+leased.ID+"/unknown", `{"generation":1,"generation":1}`), `duplicate member "generation"`},
		{"operations: mode twice", request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op, body: `{"mode":"lease","mode":"atomic"}`}, `duplicate member "mode"`},
		{"operations: case variant", request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: op, body: `{"mode":"lease","Mode":"atomic"}`}, `unknown field "Mode"`},
		{"revoke: reason twice", post(op, "/v1/admin/tokens/"+revocable.ID+"/revoke", `{"reason":"a","reason":"b"}`), `duplicate member "reason"`},
		{"reconcile: outcome twice", post(op, "/v1/admin/tokens/"+leased.ID+"/reconcile", `{"outcome":"failed","outcome":"succeeded"}`), `duplicate member "outcome"`},
		{"purge: member twice", post(op, "/v1/admin/purge", `{"a":1,"a":1}`), `"a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wantProblem(t, a.do(tt.req), http.StatusBadRequest, "invalid_request")
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to mention %q", p.Detail, tt.detail)
			}
		})
	}

	if n := a.count("tokens"); n != tokensBefore {
		t.Errorf("%d tokens, want %d: a refused issue wrote one", n, tokensBefore)
	}
	for _, tok := range []issued{victim, revocable} {
		if s, g := a.tokenState(tok.ID); s != token.Issued || g != 0 {
			t.Errorf("token %s is %s gen %d, want issued gen 0", tok.ID, s, g)
		}
	}
	if s, g := a.tokenState(leased.ID); s != token.Pending || g != 1 {
		t.Errorf("leased token is %s gen %d, want pending gen 1", s, g)
	}
	if n := a.count("ledger_entries"); n != 0 {
		t.Errorf("%d ledger entries, want 0", n)
	}
	var mode string
	if err := a.pool.QueryRow(t.Context(), `SELECT mode FROM operations WHERE tenant_id = 'acme' AND name = 'pay.card'`).Scan(&mode); err != nil || mode != "lease" {
		t.Errorf("pay.card is %q (%v), want lease", mode, err)
	}
}

// TestPayloadNumbersBindExactly: a payload binds its numbers exactly. A
// token bound to order 2^53 refuses a spend naming 2^53+1 (one IEEE-754
// double, one RFC 8785 form) with 400, runs no handler and credits nothing;
// the order it was issued for spends. An order id past 2^53 is refused at
// issue.
func TestPayloadNumbersBindExactly(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []int64 // order ids the handler executed
	)
	a := newAPI(t, func(cfg *httpapi.Config) {
		handlers := consume.NewRegistry()
		ledger.Register(handlers)
		credit, _ := handlers.Lookup(ledger.Credit)
		// order.pay credits the ledger for one order, reading its payload
		// the way tokend reads every payload.
		handlers.Register("order.pay", consume.HandlerFunc(func(ctx context.Context, tx pgx.Tx, c consume.Call) (consume.Outcome, error) {
			var p struct {
				Account string `json:"account"`
				Amount  int64  `json:"amount"`
				OrderID int64  `json:"order_id"`
			}
			if err := jsonread.Unmarshal(c.Payload, &p); err != nil {
				return consume.Outcome{}, fmt.Errorf("%w: %w", consume.ErrInvalidPayload, err)
			}
			mu.Lock()
			seen = append(seen, p.OrderID)
			mu.Unlock()
			c.Payload = fmt.Appendf(nil, `{"account":%q,"amount":%d}`, p.Account, p.Amount)
			return credit.Execute(ctx, tx, c)
		}))
		// The keyring newAPI issues under: the same key gives the same ids.
		keys, err := token.NewKeyring(tokentest.ServerKey)
		if err != nil {
			t.Fatal(err)
		}
		spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Spender = spender
	})
	key := a.client()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/order.pay", key: a.operator(), body: `{"mode":"atomic"}`}); res.status != http.StatusOK {
		t.Fatalf("PUT = %d %s", res.status, res.body)
	}

	tok := a.issue(key, "order-2^53", `{"operation":"order.pay","subject":"u","ttl_seconds":300,"payload":{"account":"acc_1","amount":5,"order_id":9007199254740992}}`)
	spend := func(orderID string) response {
		return a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"order.pay","subject":"u","payload":{"account":"acc_1","amount":5,"order_id":%s}}`, tok.Token, orderID))
	}
	for _, other := range []string{"9007199254740993", "9007199254740992.5", "9007199254740992.0000000000000001", "90071992547409930e-1"} {
		p := wantProblem(t, spend(other), http.StatusBadRequest, "invalid_request")
		if !strings.Contains(p.Detail, "payload.order_id") {
			t.Errorf("spend with order_id %s: detail %q does not name payload.order_id", other, p.Detail)
		}
	}
	if b := a.balance("acme", "acc_1"); b != 0 {
		t.Fatalf("balance = %d after spends naming another order, want 0", b)
	}
	if s, _ := a.tokenState(tok.ID); s != token.Issued {
		t.Fatalf("token is %s after refused spends, want issued", s)
	}
	if len(seen) != 0 {
		t.Fatalf("the handler ran for orders %v, want none", seen)
	}

	if res := spend("9007199254740992"); res.status != http.StatusOK {
		t.Fatalf("spend with the bound order id = %d %s", res.status, res.body)
	}
	if b := a.balance("acme", "acc_1"); b != 5 || len(seen) != 1 || seen[0] != 9007199254740992 {
		t.Errorf("balance %d, orders executed %v; want 5 and [9007199254740992]", b, seen)
	}

	res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: key, header: http.Header{"Idempotency-Key": {"order-big"}},
		body: `{"operation":"order.pay","subject":"u","ttl_seconds":300,"payload":{"account":"acc_1","amount":5,"order_id":9007199254740993}}`})
	wantProblem(t, res, http.StatusBadRequest, "invalid_request")
	if n := a.count("tokens"); n != 1 {
		t.Errorf("%d tokens after a refused issue, want 1", n)
	}
}

// TestCaseVariantIsNotExecuted: a payload holding "amount" and "Amount" is
// two members to the digest; the handler must not read it as one of them
// either. The issue that binds it is refused, and so is a spend of an
// unbound token that carries it; nothing is credited.
func TestCaseVariantIsNotExecuted(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	const payload = `{"account":"acc_1","amount":5,"Amount":500}`
	res := a.issueRaw("variant", `{"operation":"ledger.credit","subject":"u","ttl_seconds":300,"payload":`+payload+`}`)
	if p := wantProblem(t, res, http.StatusBadRequest, "invalid_request"); !strings.Contains(p.Detail, `Amount`) {
		t.Errorf("issue detail %q does not name the member", p.Detail)
	}
	tok := a.issue(key, "variant-unbound", `{"operation":"ledger.credit","subject":"u","ttl_seconds":300}`)
	res = a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"u","payload":%s}`, tok.Token, payload))
	p := wantProblem(t, res, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(p.Detail, `Amount`) {
		t.Errorf("detail %q does not name the member", p.Detail)
	}
	if b := a.balance("acme", "acc_1"); b != 0 {
		t.Errorf("balance = %d, want 0", b)
	}
	if s, _ := a.tokenState(tok.ID); s != token.Issued {
		t.Errorf("token is %s, want issued", s)
	}
}

// TestOneReadingOfEveryHeader: a request that gives Authorization,
// Idempotency-Key or Content-Type twice is 400 invalid_request, a JSON
// route's body of another Content-Type or with a Content-Encoding is 415
// unsupported_media_type, and neither changes anything; application/json
// (with charset=utf-8 or not), no Content-Type at all, and identity
// encoding are read as JSON.
func TestOneReadingOfEveryHeader(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	acme, globex := a.client(), a.key("globex", "client")
	tok := a.issue(acme, "one-header", creditBody("hana", 5))
	tokensBefore := a.count("tokens")
	issue := func(h http.Header) request {
		return request{method: http.MethodPost, path: "/v1/tokens", body: creditBody("hana", 5), header: h}
	}
	spend := func(h http.Header) request {
		return request{method: http.MethodPost, path: "/v1/tokens/consume", key: acme, body: consumeBody(tok, "hana", 5), header: h}
	}
	tests := []struct {
		name   string
		req    request
		status int
		code   string
	}{
		{"two keys of two tenants", issue(http.Header{"Authorization": {"Bearer " + acme, "Bearer " + globex}, "Idempotency-Key": {"dup-auth"}}), 400, "invalid_request"},
		{"one key twice", issue(http.Header{"Authorization": {"Bearer " + acme, "Bearer " + acme}, "Idempotency-Key": {"dup-auth-2"}}), 400, "invalid_request"},
		{"two intent ids", issue(http.Header{"Authorization": {"Bearer " + acme}, "Idempotency-Key": {"dup-1", "dup-2"}}), 400, "invalid_request"},
		{"two content types", spend(http.Header{"Content-Type": {"application/json", "application/json"}}), 400, "invalid_request"},
		{"text/plain", spend(http.Header{"Content-Type": {"text/plain"}}), 415, "unsupported_media_type"},
		{"a form", spend(http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}), 415, "unsupported_media_type"},
		{"multipart", spend(http.Header{"Content-Type": {"multipart/form-data; boundary=b"}}), 415, "unsupported_media_type"},
		{"another charset", spend(http.Header{"Content-Type": {"application/json; charset=iso-8859-1"}}), 415, "unsupported_media_type"},
		{"a +json type", spend(http.Header{"Content-Type": {"application/merge-patch+json"}}), 415, "unsupported_media_type"},
		{"a type that does not parse", spend(http.Header{"Content-Type": {"application/json; =x"}}), 415, "unsupported_media_type"},
		{"gzip on a plain body", spend(http.Header{"Content-Encoding": {"gzip"}}), 415, "unsupported_media_type"},
		{"identity then gzip", spend(http.Header{"Content-Encoding": {"identity, gzip"}}), 415, "unsupported_media_type"},
		{"two encodings", spend(http.Header{"Content-Encoding": {"identity", "identity"}}), 400, "invalid_request"},
		{"an issue in a form", issue(http.Header{"Authorization": {"Bearer " + acme}, "Idempotency-Key": {"form"}, "Content-Type": {"application/x-www-form-urlencoded"}}), 415, "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantProblem(t, a.do(tt.req), tt.status, tt.code)
		})
	}
	if n := a.count("tokens"); n != tokensBefore {
		t.Errorf("tokens = %d, want %d: a refused request issued one", n, tokensBefore)
	}
	if s, _ := a.tokenState(tok.ID); s != token.Issued {
		t.Errorf("token %s after refused spends, want issued", s)
	}
	if b := a.balance("acme", "hana"); b != 0 {
		t.Errorf("balance = %d after refused spends, want 0", b)
	}

	// What is read as JSON.
	for i, h := range []http.Header{
		{"Content-Type": {"application/json"}},
		{"Content-Type": {"Application/JSON; Charset=UTF-8"}},
		{"Content-Encoding": {"identity"}},
		{},
	} {
		h.Set("Authorization", "Bearer "+acme)
		h.Set("Idempotency-Key", fmt.Sprint("read-as-json-", i))
		if res := a.do(issue(h)); res.status != http.StatusCreated {
			t.Errorf("issue with %v: %d %s, want 201", h, res.status, res.body)
		}
	}
	if res := a.do(spend(http.Header{"Content-Type": {"application/json; charset=utf-8"}})); res.status != http.StatusOK {
		t.Errorf("spend: %d %s", res.status, res.body)
	}
	if b := a.balance("acme", "hana"); b != 5 {
		t.Errorf("balance = %d, want 5", b)
	}
}
