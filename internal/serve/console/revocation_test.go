package console_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/token"
)

// A session ends at the first request after its key is revoked: it is sent
// to sign in, its cookie cleared, and its forms do nothing.
func TestRevokedKeyEndsSession(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	k, key, err := apikey.Create(t.Context(), s.pool, tenant, apikey.Operator)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, s: s}
	c.signIn(key)
	other := &client{t: t, s: s}
	other.signIn(s.operatorKey)
	csrf := c.csrf()
	id := s.issue(t, "ledger.credit").Token.ID

	if _, err := apikey.Revoke(t.Context(), s.pool, tenant, k.ID); err != nil {
		t.Fatal(err)
	}
	resp, _ := c.do(http.MethodGet, "/console/tokens", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Errorf("revoked key's session: GET /console/tokens = %d to %q, want 303 to /console/signin", resp.StatusCode, resp.Header.Get("Location"))
	}
	cleared := false
	for _, ck := range resp.Cookies() {
		cleared = cleared || ck.Name == "tokend_console" && ck.MaxAge < 0 && ck.Value == ""
	}
	if !cleared {
		t.Errorf("revoked key's session: cookie not cleared, Set-Cookie %q", resp.Header.Values("Set-Cookie"))
	}
	// Even with the old cookie and its CSRF token, nothing is done.
	resp, _ = c.do(http.MethodPost, "/console/tokens/"+id+"/revoke", c.sameOrigin(), url.Values{"csrf": {csrf}, "reason": {"after the key's revocation"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" || s.state(t, id) != token.Issued {
		t.Errorf("revoked key's session: revoke = %d to %q, token %s; want 303 to /console/signin, token still issued", resp.StatusCode, resp.Header.Get("Location"), s.state(t, id))
	}
	// Sessions of other keys of the tenant go on.
	if resp, _ := other.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("another key's session: GET /console/tokens = %d, want 200", resp.StatusCode)
	}
}

// When whether the key is live cannot be told, the page fails and the
// session is kept.
func TestSessionLiveCheckFails(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		asked []string
	)
	s := newServer(t, func(c *console.Config) {
		c.Logger = slog.New(slog.DiscardHandler)
		c.Live = func(_ context.Context, tenant, keyID string) error {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, tenant+"/"+keyID)
			if len(asked) > 1 {
				return errors.New("database down")
			}
			return nil
		}
	})
	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	if resp, _ := c.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /console/tokens = %d, want 200", resp.StatusCode)
	}
	resp, body := c.do(http.MethodGet, "/console/tokens", nil, nil)
	if resp.StatusCode != http.StatusInternalServerError || len(resp.Cookies()) != 0 {
		t.Errorf("live check failing: GET /console/tokens = %d, cookies %v; want 500 and the session kept:\n%s", resp.StatusCode, resp.Cookies(), body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != asked[1] || !strings.HasPrefix(asked[0], tenant+"/"+apikey.IDPrefix) {
		t.Errorf("Live asked about %q, want the session's %s/key_… twice", asked, tenant)
	}
}

// TestSignOutEndsSessionEverywhere: a cookie copied before sign-out is
// refused after it, on the instance that signed out and on another sharing
// the database; another session of the same key goes on.
func TestSignOutEndsSessionEverywhere(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	cons, err := console.New(console.Config{Pool: s.pool, SecretKey: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	cons.Mount(e)
	second := httptest.NewServer(e)
	t.Cleanup(second.Close)

	c := &client{t: t, s: s}
	c.signIn(s.operatorKey)
	other := &client{t: t, s: s}
	other.signIn(s.operatorKey)
	copied := *c.cookie
	onSecond := &client{t: t, s: &server{Server: second}, cookie: &copied}
	if resp, _ := onSecond.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the session on another instance before sign-out: %d, want 200", resp.StatusCode)
	}
	resp, _ := c.do(http.MethodPost, "/console/signout", c.sameOrigin(), url.Values{"csrf": {c.csrf()}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("sign-out = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for name, cl := range map[string]*client{"the same instance": {t: t, s: s, cookie: &copied}, "another instance": onSecond} {
		resp, _ := cl.do(http.MethodGet, "/console/tokens", nil, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
			t.Errorf("%s, the cookie copied before sign-out: %d to %q, want 303 to /console/signin", name, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp, _ := other.do(http.MethodGet, "/console/tokens", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("another session of the key after the sign-out: %d, want 200", resp.StatusCode)
	}
}
