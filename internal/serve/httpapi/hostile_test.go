package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/httpapi"
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
		c.Mounts = append(c.Mounts, dispatch.Routes(c.Pool, keys, dispatch.Options{}))
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
