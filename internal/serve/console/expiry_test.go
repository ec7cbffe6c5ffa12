package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tokend/tokend/token"
)

// An issued token past its expiry, by the database clock, is in the expired
// tab and not the issued one, shows as expired, and cannot be revoked,
// before the sweeper records it; the first read that finds it records the
// expiry, and the revoke changes nothing.
func TestExpiredTabBeforeTheSweep(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	csrf := c.csrf()
	late := s.issue(t, "ledger.credit").Token.ID
	live := s.issue(t, "ledger.credit").Token.ID
	if _, err := s.pool.Exec(t.Context(), `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name, method, path string
		form               url.Values
		wantStatus         int
		want, notWant      []string
	}{
		{"expired tab", http.MethodGet, "/console/tokens?state=expired", nil, http.StatusOK,
			[]string{late, `<span class="badge state-expired">expired</span>`}, []string{live}},
		{"issued tab", http.MethodGet, "/console/tokens?state=issued", nil, http.StatusOK,
			[]string{live}, []string{late}},
		{"all tab", http.MethodGet, "/console/tokens?state=all", nil, http.StatusOK,
			[]string{late, live, `<span class="badge state-expired">expired</span>`}, nil},
		{"token page", http.MethodGet, "/console/tokens/" + late, nil, http.StatusOK,
			[]string{"expired"}, []string{"/revoke"}},
		{"revoke page", http.MethodGet, "/console/tokens/" + late + "/revoke", nil, http.StatusConflict,
			[]string{"this one is expired"}, nil},
		{"revoke", http.MethodPost, "/console/tokens/" + late + "/revoke", url.Values{"csrf": {csrf}, "reason": {"too late"}}, http.StatusConflict,
			[]string{"Not revoked"}, nil},
	}
	for _, tt := range tests {
		resp, body := c.do(tt.method, tt.path, c.sameOrigin(), tt.form)
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s: %d, want %d:\n%s", tt.name, resp.StatusCode, tt.wantStatus, body)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: no %q in:\n%s", tt.name, w, body)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(body, w) {
				t.Errorf("%s: %q in:\n%s", tt.name, w, body)
			}
		}
	}
	if got := s.state(t, late); got != token.Expired {
		t.Errorf("the row is %s; want expired, as the first read recorded it, and not revoked", got)
	}
}
