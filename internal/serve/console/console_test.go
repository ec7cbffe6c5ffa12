package console_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/token"
)

func TestSignIn(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	tests := []struct {
		name       string
		key        string
		wantStatus int
		wantPage   string // in the answer's body
	}{
		{"operator key", s.operatorKey, http.StatusSeeOther, ""},
		{"client key", createKey(t, s.pool, tenant, apikey.Client), http.StatusForbidden, "needs an operator key"},
		{"unknown key", apikey.SecretPrefix + strings.Repeat("A", 43), http.StatusUnauthorized, "unknown or revoked"},
		{"not a key", "hunter2", http.StatusUnauthorized, "unknown or revoked"},
	}
	for _, tt := range tests {
		c := &client{t: t, s: s}
		resp, body := c.do(http.MethodPost, "/console/signin", c.sameOrigin(), url.Values{"key": {tt.key}})
		if resp.StatusCode != tt.wantStatus || !strings.Contains(body, tt.wantPage) {
			t.Errorf("%s: sign in = %d, want %d with %q:\n%s", tt.name, resp.StatusCode, tt.wantStatus, tt.wantPage, body)
		}
		if signedIn := len(resp.Cookies()) > 0; signedIn != (tt.wantStatus == http.StatusSeeOther) {
			t.Errorf("%s: session cookie set = %v", tt.name, signedIn)
		}
	}
}

// The session cookie names the key; it never holds it, and it cannot be
// edited into another tenant's session.
func TestSessionCookie(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if c.cookie == nil {
		t.Fatal("no session cookie")
	}
	if !c.cookie.HttpOnly || c.cookie.SameSite != http.SameSiteStrictMode || c.cookie.Path != "/console" {
		t.Errorf("session cookie %+v, want HttpOnly, SameSite=Strict, Path=/console", c.cookie)
	}
	body, _, _ := strings.Cut(c.cookie.Value, ".")
	decoded, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || strings.Contains(c.cookie.Value+string(decoded), strings.TrimPrefix(s.operatorKey, apikey.SecretPrefix)) {
		t.Errorf("session cookie %q (%s, %v) holds the key", c.cookie.Value, decoded, err)
	}
	if resp, _ := c.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("signed in: GET /console/tokens = %d, want 200", resp.StatusCode)
	}

	forged := strings.Replace(string(decoded), `"t":"demo"`, `"t":"acme"`, 1)
	c.cookie.Value = base64.RawURLEncoding.EncodeToString([]byte(forged)) + c.cookie.Value[len(body):]
	if resp, _ := c.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Errorf("forged session: GET /console/tokens = %d to %q, want 303 to /console/signin", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// A revoke the operator did not ask for, from another site or without the
// session's CSRF token, is refused and changes nothing.
func TestCSRF(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	csrf := c.csrf()
	id := s.issue(t, "ledger.credit").Token.ID
	tests := []struct {
		name   string
		header http.Header
		csrf   string
	}{
		{"another site", http.Header{"Origin": {"https://evil.example"}}, csrf},
		{"another site's referer", http.Header{"Referer": {"https://evil.example/page"}}, csrf},
		{"opaque origin", http.Header{"Origin": {"null"}}, csrf},
		{"no origin nor referer", http.Header{}, csrf},
		{"no CSRF token", c.sameOrigin(), ""},
		{"another session's CSRF token", c.sameOrigin(), strings.Repeat("x", len(csrf))},
	}
	for _, tt := range tests {
		resp, _ := c.do(http.MethodPost, "/console/tokens/"+id+"/revoke", tt.header, url.Values{"csrf": {tt.csrf}, "reason": {"forged"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: revoke = %d, want 403", tt.name, resp.StatusCode)
		}
		if st := s.state(t, id); st != token.Issued {
			t.Fatalf("%s: the token is %s, want still issued", tt.name, st)
		}
	}
	if n := len(s.changes()); n != 0 {
		t.Fatalf("refused revokes reported %d changes", n)
	}
	resp, _ := c.do(http.MethodPost, "/console/tokens/"+id+"/revoke", c.sameOrigin(), url.Values{"csrf": {csrf}, "reason": {"asked"}})
	if resp.StatusCode != http.StatusSeeOther || s.state(t, id) != token.Revoked {
		t.Errorf("the operator's own revoke = %d, token %s; want 303 and revoked", resp.StatusCode, s.state(t, id))
	}
	// Config.Changed hears of the committed revoke, so a cache can drop it.
	if ch := s.changes(); len(ch) != 1 || ch[0].ID != id || ch[0].State != token.Revoked {
		t.Errorf("Changed was told %+v, want the revoked token once", ch)
	}
}

// An operator sees and acts on the tokens of their own tenant only.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	id := s.issue(t, "ledger.credit").Token.ID
	c := &client{t: t, s: s}
	c.signIn(createKey(t, s.pool, "acme", apikey.Operator))
	csrf := c.csrf()

	if _, body := c.do(http.MethodGet, "/console/tokens?state=all", nil, nil); strings.Contains(body, id) {
		t.Errorf("acme's token list shows demo's token %s", id)
	}
	for _, path := range []string{"/console/tokens/" + id, "/console/tokens/" + id + "/revoke"} {
		if resp, _ := c.do(http.MethodGet, path, nil, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("acme: GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
	resp, _ := c.do(http.MethodPost, "/console/tokens/"+id+"/revoke", c.sameOrigin(), url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusNotFound || s.state(t, id) != token.Issued {
		t.Errorf("acme: revoke demo's token = %d, token %s; want 404 and still issued", resp.StatusCode, s.state(t, id))
	}
}

// The console refuses what the token's state does not allow, and says so.
func TestInvalidActions(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	csrf := c.csrf()
	issued := s.issue(t, "ledger.credit").Token.ID
	unknown := s.unknown(t).Token.ID
	tests := []struct {
		name       string
		method     string
		path       string
		form       url.Values
		wantStatus int
		wantBody   string
	}{
		{"revoke page of an unknown token", http.MethodGet, "/console/tokens/" + unknown + "/revoke", nil, http.StatusConflict, "Only an issued token can be revoked"},
		{"revoke an unknown token", http.MethodPost, "/console/tokens/" + unknown + "/revoke", url.Values{"csrf": {csrf}}, http.StatusConflict, "Not revoked"},
		{"reconcile page of an issued token", http.MethodGet, "/console/tokens/" + issued + "/reconcile", nil, http.StatusConflict, "Only a token whose outcome is unknown"},
		{"reconcile an issued token", http.MethodPost, "/console/tokens/" + issued + "/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}}, http.StatusConflict, "Not reconciled"},
		{"no outcome", http.MethodPost, "/console/tokens/" + unknown + "/reconcile", url.Values{"csrf": {csrf}}, http.StatusUnprocessableEntity, "Not reconciled"},
		{"result that is not JSON", http.MethodPost, "/console/tokens/" + unknown + "/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "result": {"{oops"}}, http.StatusUnprocessableEntity, "Not reconciled: result: is not JSON"},
		{"success with a failure status", http.MethodPost, "/console/tokens/" + unknown + "/reconcile", url.Values{"csrf": {csrf}, "outcome": {"succeeded"}, "status": {"500"}}, http.StatusUnprocessableEntity, "needs a 2xx status"},
		{"no such token", http.MethodGet, "/console/tokens/" + token.NewID(), nil, http.StatusNotFound, "has no token"},
		{"no such state", http.MethodGet, "/console/tokens?state=lost", nil, http.StatusBadRequest, "no token state"},
	}
	for _, tt := range tests {
		resp, body := c.do(tt.method, tt.path, c.sameOrigin(), tt.form)
		if resp.StatusCode != tt.wantStatus || !strings.Contains(body, tt.wantBody) {
			t.Errorf("%s: %d, want %d with %q:\n%s", tt.name, resp.StatusCode, tt.wantStatus, tt.wantBody, body)
		}
	}
	if s.state(t, issued) != token.Issued || s.state(t, unknown) != token.Unknown {
		t.Errorf("after the refused actions: tokens %s and %s, want issued and unknown", s.state(t, issued), s.state(t, unknown))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := console.Config{Pool: &pgxpool.Pool{}, SecretKey: secretKey}
	if _, err := console.New(valid); err != nil {
		t.Fatalf("New(valid) = %v", err)
	}
	tests := []struct {
		name   string
		change func(c *console.Config)
	}{
		{"no pool", func(c *console.Config) { c.Pool = nil }},
		{"short secret key", func(c *console.Config) { c.SecretKey = "short" }},
		{"relative path", func(c *console.Config) { c.Path = "console" }},
		{"path ending in /", func(c *console.Config) { c.Path = "/console/" }},
		{"negative session ttl", func(c *console.Config) { c.SessionTTL = -1 }},
	}
	for _, tt := range tests {
		c := valid
		tt.change(&c)
		if cons, err := console.New(c); err == nil || cons != nil {
			t.Errorf("%s: New = %v, %v; want an error", tt.name, cons, err)
		}
	}
}

// TestSignInRateLimited: sign-in attempts are limited per client address
// before the key is looked up. After Burst failed attempts, the next is
// refused with 429, Retry-After and a message on the page, even with a
// valid operator key, and the key is not looked up; once the window has
// passed (on the injected clock), the same key signs in.
func TestSignInRateLimited(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		now     = time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
		lookups int
	)
	s := newServer(t, func(c *console.Config) {
		c.SignInLimit = console.SignInLimit{PerSecond: 1.0 / 60, Burst: 3}
		c.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		c.Resolve = func(ctx context.Context, presented string) (apikey.Key, error) {
			mu.Lock()
			lookups++
			mu.Unlock()
			return apikey.Resolve(ctx, c.Pool, presented)
		}
	})
	looked := func() int { mu.Lock(); defer mu.Unlock(); return lookups }
	c := &client{t: t, s: s}
	for i := range 3 {
		resp, _ := c.do(http.MethodPost, "/console/signin", c.sameOrigin(), url.Values{"key": {apikey.SecretPrefix + strings.Repeat("A", 43)}})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong key %d: sign in = %d, want 401", i+1, resp.StatusCode)
		}
	}
	if looked() != 3 {
		t.Fatalf("%d key lookups for 3 attempts, want 3", looked())
	}
	resp := c.signIn(s.operatorKey)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" || c.cookie != nil {
		t.Errorf("4th attempt, with a valid key: %d, Retry-After %q, cookie %v; want 429, 60, none", resp.StatusCode, resp.Header.Get("Retry-After"), c.cookie)
	}
	if looked() != 3 {
		t.Errorf("the refused attempt looked the key up: %d lookups, want 3", looked())
	}
	_, page := c.do(http.MethodPost, "/console/signin", c.sameOrigin(), url.Values{"key": {s.operatorKey}})
	if !strings.Contains(page, "Too many sign-in attempts from your address. Wait 60 seconds") {
		t.Errorf("refused sign-in page does not say why:\n%s", page)
	}

	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	if resp := c.signIn(s.operatorKey); resp.StatusCode != http.StatusSeeOther || c.cookie == nil {
		t.Errorf("after the window: sign in = %d, cookie %v; want 303 and a session", resp.StatusCode, c.cookie)
	}
	if looked() != 4 {
		t.Errorf("%d key lookups, want 4", looked())
	}
}
