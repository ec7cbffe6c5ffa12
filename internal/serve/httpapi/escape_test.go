package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestProblemBodiesAreNotHTMLEscaped: through the router, a problem whose
// detail holds <, > and & (a JSON member's name, an operation's name, an
// Idempotency-Key) says them as themselves, as does a success answer.
func TestProblemBodiesAreNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tests := []struct {
		name string
		req  request
		want string // in the body as it is
	}{
		{"unknown member", request{method: http.MethodPost, path: "/v1/tokens", key: key, header: http.Header{"Idempotency-Key": {"k-1"}},
			body: `{"operation":"ledger.credit","subject":"a","ttl_seconds":60,"<key>&":1}`}, `<key>&`},
		{"unknown operation", request{method: http.MethodPost, path: "/v1/tokens", key: key, header: http.Header{"Idempotency-Key": {"k-2"}},
			body: `{"operation":"<op>&more","subject":"a","ttl_seconds":60}`}, `<op>&more`},
		{"a success", request{method: http.MethodPost, path: "/v1/tokens", key: key, header: http.Header{"Idempotency-Key": {"k-3"}},
			body: `{"operation":"ledger.credit","subject":"<alice>&co","ttl_seconds":60}`}, `"subject":"<alice>&co"`},
	}
	for _, tt := range tests {
		res := a.do(tt.req)
		body := string(res.body)
		if !strings.Contains(body, tt.want) || strings.Contains(body, `\u003c`) || strings.Contains(body, `\u003e`) || strings.Contains(body, `\u0026`) {
			t.Errorf("%s: %d %s; want %s in it as it is", tt.name, res.status, body, tt.want)
		}
	}
}
