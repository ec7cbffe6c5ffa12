package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/infra/jsonread"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/internal/serve/demo"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/webhookapi"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/openapi"
	"github.com/tokend/tokend/token"
)

// TestEveryOperationAnswersHostileRequestsAsDocumented sends every operation
// of the OpenAPI document hostile requests: no key, a key given twice, an
// Idempotency-Key given twice, a body of another Content-Type, an encoded
// body, a body over the bound, path parameters that are not text or far too
// long, a query that does not parse. Each answer goes through the contract
// check (its status, headers and body must be what the document declares
// for the operation), and every error must be problem+json and no 5xx.
func TestEveryOperationAnswersHostileRequestsAsDocumented(t *testing.T) {
	t.Parallel()
	keys, err := token.NewKeyring(strings.Repeat("h", token.MinKeyLen))
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = append(c.Mounts, webhookapi.Mount(c.Pool, keys, dispatch.Options{}))
		c.MaxBodyBytes = 4 << 10
	})
	client, op := a.client(), a.operator()
	j, err := openapi.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	params := []string{"%00", "%FF%FE", strings.Repeat("x", 8<<10), "tok_" + strings.Repeat("0", 26), "..%2F..%2Fadmin", "%E2%80%AE"}
	body := `{"operation":"ledger.credit","subject":"s","ttl_seconds":60}`
	n := 0
	for path, item := range doc.Paths {
		for method := range item {
			if method == "parameters" || path == "/metrics" || path == "/" { // metrics and the console's index: not served by this harness
				continue
			}
			method = strings.ToUpper(method)
			fill := func(v string) string {
				out := path
				for strings.Contains(out, "{") {
					i, k := strings.Index(out, "{"), strings.Index(out, "}")
					out = out[:i] + v + out[k+1:]
				}
				return out
			}
			plain := fill("x1")
			var variants []request
			add := func(r request) {
				r.method = method
				variants = append(variants, r)
			}
			add(request{path: plain, body: body})
			add(request{path: plain, body: body, header: http.Header{"Authorization": {"Bearer " + client, "Bearer " + op}}})
			add(request{path: plain, key: op, body: body, header: http.Header{"Idempotency-Key": {"i-1", "i-2"}}})
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=latin1", "application/json;;", "application/xml"} {
				add(request{path: plain, key: op, body: body, header: http.Header{"Content-Type": {ct}}})
			}
			add(request{path: plain, key: op, body: body, header: http.Header{"Content-Type": {"application/json", "text/plain"}}})
			for _, ce := range []string{"gzip", "br", "identity, gzip", "x-unknown"} {
				add(request{path: plain, key: op, body: body, header: http.Header{"Content-Encoding": {ce}}})
			}
			add(request{path: plain, key: op, body: `{"x":"` + strings.Repeat("a", 8<<10) + `"}`})
			for _, p := range params {
				add(request{path: fill(p), key: op, body: body})
			}
			add(request{path: plain + "?limit=-1&cursor=%ZZ&after=" + url.QueryEscape("99999999999999999999999") + "&state=%00", key: op})
			for _, r := range variants {
				n++
				if r.method == http.MethodGet || r.method == http.MethodDelete {
					r.body = ""
					if r.header.Get("Content-Encoding") == "" && r.header.Get("Content-Type") == "" && strings.HasSuffix(r.path, "x1") && len(r.header) == 0 && r.key != "" {
						continue // a plain read: not hostile
					}
				}
				res := a.do(r)
				name := fmt.Sprintf("%s %.80s %v", r.method, r.path, r.header)
				if res.status >= 500 {
					t.Errorf("%s: %d %s", name, res.status, res.body)
				}
				if res.status >= 400 && res.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s: %d with Content-Type %q, want a problem", name, res.status, res.header.Get("Content-Type"))
				}
				if len(r.header["Authorization"]) > 1 || len(r.header["Idempotency-Key"]) > 1 || len(r.header["Content-Type"]) > 1 {
					wantProblem(t, res, http.StatusBadRequest, "invalid_request")
				}
				if ce := r.header.Get("Content-Encoding"); ce != "" {
					wantProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
				}
			}
		}
	}
	t.Logf("%d hostile requests", n)
}

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
	if res := a.post(key, "/v1/tokens/consume", spendBody(funding, "ledger.credit", "user-1", `{"account":"acc_1","amount":50}`)); res.status != http.StatusOK {
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

// unstorable are strings Postgres cannot store in a text column: a NUL, and
// bytes that are not UTF-8.
var unstorable = []string{"x\x00y", "x\xffy"}

// TestEveryRouteRefusesUnstorableText walks every route the server has
// (built-in and mounted, taken from the engine, so a new route is walked
// without editing this test) with unstorable text in each path parameter,
// in the query, in the headers the API reads and in each string of a JSON
// body, and with query strings that do not parse, with a client and an
// operator key. Every answer is 400 invalid_request (never a 5xx, never a
// query silently ignored; a client key may get 403 on an operator route
// first), and nothing in the database changes.
func TestEveryRouteRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	// The pages tokend serves beside the API are walked too.
	a := newAPI(t, func(c *httpapi.Config) {
		const secret = "walk-server-key-0123456789abcdef0123456789"
		app, err := demo.New(demo.Config{Pool: c.Pool, Issuer: c.Issuer, Spender: c.Spender, SecretKey: secret})
		if err != nil {
			t.Fatal(err)
		}
		ops, err := console.New(console.Config{Pool: c.Pool, SecretKey: secret})
		if err != nil {
			t.Fatal(err)
		}
		c.Mounts = []httpapi.Mount{func(r httpapi.Routes) { app.Mount(r.Public); ops.Mount(r.Public) }}
	})
	client, operator := a.client(), a.operator()
	a.declareLease("acme")
	tok := a.credit(client, "walk-credit", "user-1", false)
	leased, gen := a.leased(client, "walk-leased")
	unknown, _ := a.unknown(client, "walk-unknown")

	// A real value for each path parameter, so that only the unstorable text
	// stands between a request and an effect.
	params := map[string]string{"id": tok.ID, "name": "pay.card", "account": "acc_1"}
	// A body each route would act on, per route; a route missing here is
	// still walked through its path, query and headers.
	bodies := map[string]string{
		"POST /v1/tokens":                     `{"operation":"ledger.credit","subject":"user-2","ttl_seconds":60,"payload":{"account":"acc_1","amount":1,"trace_id":"t"}}`,
		"POST /v1/tokens/consume":             spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":1,"trace_id":"t"}`),
		"POST /v1/tokens/:id/complete":        fmt.Sprintf(`{"generation":%d,"status":200,"result":{"note":"done"}}`, gen),
		"POST /v1/tokens/:id/fail":            fmt.Sprintf(`{"generation":%d,"status":402,"error":{"note":"declined"}}`, gen),
		"POST /v1/tokens/:id/unknown":         fmt.Sprintf(`{"generation":%d}`, gen),
		"PUT /v1/admin/operations/:name":      `{"mode":"lease","on_lease_expiry":"takeover","ignored_fields":["trace_id"]}`,
		"POST /v1/admin/tokens/:id/revoke":    `{"reason":"walk"}`,
		"POST /v1/admin/tokens/:id/reconcile": `{"outcome":"succeeded","status":200,"result":{"note":"done"}}`,
		"POST /v1/admin/purge":                `{}`,
	}
	// The token each route acts on, where it is not tok.
	ids := map[string]string{
		"POST /v1/tokens/:id/complete":        leased.ID,
		"POST /v1/tokens/:id/fail":            leased.ID,
		"POST /v1/tokens/:id/unknown":         leased.ID,
		"POST /v1/admin/tokens/:id/reconcile": unknown.ID,
	}

	before := a.snapshot()
	routes := a.srv.EngineRoutes()
	if len(routes) < len(bodies) {
		t.Fatalf("the engine lists %d routes", len(routes))
	}
	t.Logf("walking %d routes", len(routes))
	for _, rt := range routes {
		route := rt.Method + " " + rt.Path
		body := bodies[route]
		path := func(bad string, in string) string {
			var b strings.Builder
			for seg := range strings.SplitSeq(rt.Path, "/") {
				if seg == "" {
					continue
				}
				b.WriteString("/")
				if name, ok := strings.CutPrefix(seg, ":"); ok {
					v := params[name]
					if name == "id" && ids[route] != "" {
						v = ids[route]
					}
					if name == in {
						v = bad
					}
					seg = url.PathEscape(v)
				}
				b.WriteString(seg)
			}
			return b.String()
		}
		var cases []request
		for _, bad := range unstorable {
			for seg := range strings.SplitSeq(rt.Path, "/") {
				if name, ok := strings.CutPrefix(seg, ":"); ok {
					cases = append(cases, request{method: rt.Method, path: path(bad, name), body: body})
				}
			}
			for _, q := range []string{"state=", "operation=", "subject=", "cursor=", "unknown=", ""} {
				cases = append(cases, request{method: rt.Method, path: path(bad, "") + "?" + q + url.QueryEscape(bad), body: body})
			}
			cases = append(cases, request{method: rt.Method, path: path(bad, ""), body: body,
				header: http.Header{"Idempotency-Key": {bad}}})
			for _, b := range mutations(t, body, bad) {
				cases = append(cases, request{method: rt.Method, path: path(bad, ""), body: b})
			}
			if rt.Method != http.MethodGet {
				// The pages' forms; sent to every route, the API's too.
				for _, b := range []string{"reason=", "name=", url.QueryEscape(bad) + "="} {
					cases = append(cases, request{method: rt.Method, path: path(bad, ""), body: b + url.QueryEscape(bad),
						header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Origin": {"http://example.com"}}})
				}
			}
		}
		// Query strings that do not parse.
		for _, q := range []string{"state=%zz", "limit=%zz", "%zz=1", "a=1;b=2"} {
			cases = append(cases, request{method: rt.Method, path: path("", "") + "?" + q, body: body})
		}
		for _, key := range []string{client, operator} {
			for _, r := range cases {
				r.key = key
				if r.header == nil {
					r.header = http.Header{}
				}
				if r.header.Get("Content-Type") == "" {
					r.header.Set("Content-Type", "application/json")
				}
				if r.header.Get("Idempotency-Key") == "" {
					r.header.Set("Idempotency-Key", "walk-issue")
				}
				res := a.do(r)
				var p problem
				_ = jsonLoose(res.body, &p)
				// A body is read only once the key may use the route.
				refused := key == client && strings.HasPrefix(rt.Path, "/v1/admin/") && res.status == http.StatusForbidden
				if !refused && (res.status != http.StatusBadRequest || p.Code != "invalid_request") {
					t.Errorf("%s %q body %q: %d %s; want 400 invalid_request", r.method, r.path, r.body, res.status, res.body)
				}
			}
		}
	}
	if after := a.snapshot(); !slices.Equal(after, before) {
		t.Errorf("the walk changed the database:\nbefore %q\nafter  %q", before, after)
	}
}

// snapshot digests every table a request could change.
func (a *api) snapshot() []string {
	a.t.Helper()
	var out []string
	for _, table := range []string{"tokens", "token_events", "operations", "api_keys", "ledger_entries"} {
		var n int
		var digest string
		// table is a constant of the test, never input.
		err := a.pool.QueryRow(a.t.Context(), `SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '') FROM `+table+` x`).Scan(&n, &digest)
		if err != nil {
			a.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s: %d rows, %s", table, n, digest))
	}
	return out
}

// mutations returns body once for each of its strings, keys and values,
// with that string replaced by bad, written as a JSON string holds it:
// a NUL as \u0000, other bytes raw.
func mutations(t *testing.T, body, bad string) []string {
	t.Helper()
	if body == "" {
		return nil
	}
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("sample body %s: %v", body, err)
	}
	const marker = "\u2603walk\u2603"
	var out []string
	var walk func(v any, set func(any))
	emit := func() {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		enc := strings.ReplaceAll(bad, "\x00", `\u0000`)
		out = append(out, string(bytes.Replace(b, []byte(marker), []byte(enc), 1)))
	}
	walk = func(x any, set func(any)) {
		switch x := x.(type) {
		case string:
			set(marker)
			emit()
			set(x)
		case []any:
			for i := range x {
				walk(x[i], func(n any) { x[i] = n })
			}
		case map[string]any:
			for _, k := range slices.Sorted(func(yield func(string) bool) {
				for k := range x {
					if !yield(k) {
						return
					}
				}
			}) {
				val := x[k]
				walk(val, func(n any) { x[k] = n })
				delete(x, k)
				x[marker] = val
				emit()
				delete(x, marker)
				x[k] = val
			}
		}
	}
	walk(v, func(n any) { v = n })
	return out
}

// A JSON body labelled as a form (curl -d without a Content-Type) has two
// readings, so it is refused, 415, and nothing is issued; checking form
// fields must not turn that into another answer.
func TestJSONLabelledAsForm(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	before := a.count("tokens")
	res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: a.client(),
		body:   `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":60,"payload":{"account":"a","amount":5,"trace_id":"50% off; 100%"}}`,
		header: http.Header{"Idempotency-Key": {"form-labelled"}, "Content-Type": {"application/x-www-form-urlencoded"}}})
	wantProblem(t, res, http.StatusUnsupportedMediaType, "unsupported_media_type")
	if n := a.count("tokens"); n != before {
		t.Errorf("tokens = %d, want %d", n, before)
	}
}
