package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/internal/serve/demo"
	"github.com/tokend/tokend/internal/serve/httpapi"
)

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
		"POST /v1/tokens/consume":             fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"user-1","payload":{"account":"acc_1","amount":1,"trace_id":"t"}}`, tok.Token),
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
