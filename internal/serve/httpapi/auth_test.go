package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/infra/apikey"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	client, operator := a.client(), a.operator()
	revokedKey := a.key("acme-old", apikey.Client)
	if _, err := apikey.Revoke(context.Background(), a.pool, "acme-old", a.keyIDs["acme-old/client"]); err != nil {
		t.Fatal(err)
	}
	issue := `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300}`

	tests := []struct {
		name          string
		authorization string
		method, path  string
		body          string
		status        int
		code          string
	}{
		{"no header", "", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"basic scheme", "Basic " + client, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"bearer, no key", "Bearer ", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"bare key", client, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"unknown key", "Bearer tkd_" + strings.Repeat("A", 43), http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"malformed key", "Bearer nope", http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"revoked key", "Bearer " + revokedKey, http.MethodPost, "/v1/tokens", issue, 401, "unauthorized"},
		{"token secret as key", "Bearer tks_" + strings.Repeat("A", 43), http.MethodGet, "/v1/admin/operations", "", 401, "unauthorized"},
		{"no key on admin", "", http.MethodGet, "/v1/admin/operations", "", 401, "unauthorized"},
		{"client on admin list", "Bearer " + client, http.MethodGet, "/v1/admin/operations", "", 403, "forbidden"},
		{"client on admin put", "Bearer " + client, http.MethodPut, "/v1/admin/operations/pay.card", `{"mode":"lease"}`, 403, "forbidden"},
		{"operator on client route", "Bearer " + operator, http.MethodPost, "/v1/tokens", issue, 201, ""},
		{"lower-case scheme", "bearer " + client, http.MethodPost, "/v1/tokens", issue, 201, ""},
		{"operator on admin", "Bearer " + operator, http.MethodGet, "/v1/admin/operations", "", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Idempotency-Key": {tt.name}}
			if tt.authorization != "" {
				h.Set("Authorization", tt.authorization)
			}
			res := a.do(request{method: tt.method, path: tt.path, body: tt.body, header: h})
			if tt.code == "" {
				if res.status != tt.status {
					t.Errorf("got %d %s, want %d", res.status, res.body, tt.status)
				}
				return
			}
			wantProblem(t, res, tt.status, tt.code)
			if got := res.header.Get("WWW-Authenticate"); (tt.status == 401) != strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate = %q on a %d", got, tt.status)
			}
		})
	}
	// Only the two admitted issues made tokens; the refused PUT declared nothing.
	if n := a.count("tokens"); n != 2 {
		t.Errorf("%d tokens, want 2", n)
	}
	if n := a.count("operations"); n != 0 {
		t.Errorf("%d operations declared, want 0", n)
	}
}
