package demo_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/serve/demo"
)

// noRedirects is a client that shows redirects instead of following them.
func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func postForm(t *testing.T, s *server, path string, header http.Header, v url.Values) *http.Response {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+path, strings.NewReader(v.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	r.Header = header.Clone()
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noRedirects().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func getPage(t *testing.T, s *server, path string, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	resp, err := noRedirects().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestSignIn(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	same := http.Header{"Origin": {s.URL}}

	resp, _ := getPage(t, s, "/demo/topup")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/demo/signin" {
		t.Errorf("GET /demo/topup signed out = %d to %q, want 303 to /demo/signin", resp.StatusCode, resp.Header.Get("Location"))
	}

	resp = postForm(t, s, "/demo/signin", same, url.Values{"name": {"alice"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/demo/topup" || len(resp.Cookies()) != 1 {
		t.Fatalf("sign in = %d to %q with %d cookies, want 303 to /demo/topup with the session", resp.StatusCode, resp.Header.Get("Location"), len(resp.Cookies()))
	}
	session := resp.Cookies()[0]
	if !session.HttpOnly || session.SameSite != http.SameSiteLaxMode || session.Path != "/demo" {
		t.Errorf("session cookie %+v, want HttpOnly, SameSite=Lax, Path=/demo", session)
	}

	resp, _ = getPage(t, s, "/demo/topup", session)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/demo/topup?render=") {
		t.Fatalf("GET /demo/topup signed in = %d to %q, want 303 to a rendering", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := getPage(t, s, resp.Header.Get("Location"), session)
	if resp.StatusCode != http.StatusOK || !contains(body, `<b id="user">alice</b>`, `name="tokend_token"`) {
		t.Errorf("GET /demo/topup signed in = %d, want alice's form:\n%s", resp.StatusCode, body)
	}

	tampered := *session
	tampered.Value = strings.Replace(session.Value, session.Value[:4], "AAAA", 1)
	if resp, _ := getPage(t, s, "/demo/topup", &tampered); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("GET /demo/topup with a tampered cookie = %d, want 303 to sign in", resp.StatusCode)
	}

	resp = postForm(t, s, "/demo/signin", same, url.Values{"name": {"<script>"}})
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusUnprocessableEntity || !contains(string(b), "A name is", "&lt;script&gt;") {
		t.Errorf("sign in as <script> = %d, want 422 with the name escaped:\n%s", resp.StatusCode, b)
	}
}

// A page of another site cannot make the browser send the demo's forms.
func TestSameOrigin(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"same origin", http.Header{"Origin": {s.URL}}, http.StatusSeeOther},
		{"same-origin referer, no origin", http.Header{"Referer": {s.URL + "/demo/signin"}}, http.StatusSeeOther},
		{"another site", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"another site's referer", http.Header{"Referer": {"https://evil.example/x"}}, http.StatusForbidden},
		{"opaque origin", http.Header{"Origin": {"null"}}, http.StatusForbidden},
		{"neither", http.Header{}, http.StatusForbidden},
	}
	for _, tt := range tests {
		resp := postForm(t, s, "/demo/signin", tt.header, url.Values{"name": {"alice"}})
		if resp.StatusCode != tt.want {
			t.Errorf("%s: sign in = %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

func TestPageHeaders(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	resp, _ := getPage(t, s, "/demo/signin")
	if csp := resp.Header.Get("Content-Security-Policy"); !contains(csp, "default-src 'none'", "frame-ancestors 'none'", "form-action 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, path := range []string{"/demo/static/style.css", "/demo/static/form.js"} {
		if resp, body := getPage(t, s, path); resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s = %d, %d bytes", path, resp.StatusCode, len(body))
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := demo.Config{Pool: &pgxpool.Pool{}, Issuer: &intent.Issuer{}, Spender: &consume.Spender{}, SecretKey: secretKey}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(c *demo.Config)
	}{
		{"no pool", func(c *demo.Config) { c.Pool = nil }},
		{"no issuer", func(c *demo.Config) { c.Issuer = nil }},
		{"no spender", func(c *demo.Config) { c.Spender = nil }},
		{"short secret key", func(c *demo.Config) { c.SecretKey = "short" }},
		{"relative path", func(c *demo.Config) { c.Path = "demo" }},
		{"path ending in /", func(c *demo.Config) { c.Path = "/demo/" }},
		{"rate without burst", func(c *demo.Config) { c.IPLimit = demo.RateLimit{PerSecond: 1} }},
	}
	for _, tt := range tests {
		c := valid
		tt.change(&c)
		if app, err := demo.New(c); err == nil || app != nil {
			t.Errorf("%s: New = %v, %v; want an error", tt.name, app, err)
		}
	}
	if _, err := demo.New(valid); err != nil {
		t.Errorf("New(valid) = %v", err)
	}
}

// signedIn signs in as name and returns the session cookie.
func signedIn(t *testing.T, s *server, name string) *http.Cookie {
	t.Helper()
	resp := postForm(t, s, "/demo/signin", http.Header{"Origin": {s.URL}}, url.Values{"name": {name}})
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign in as %s = %d", name, resp.StatusCode)
	}
	return resp.Cookies()[0]
}

// rendering fetches a fresh rendering of the top-up form and returns its
// token field's value and the page.
func rendering(t *testing.T, s *server, session *http.Cookie) (field, page string) {
	t.Helper()
	resp, _ := getPage(t, s, "/demo/topup", session)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET /demo/topup = %d, want 303 to a rendering", resp.StatusCode)
	}
	resp, page = getPage(t, s, resp.Header.Get("Location"), session)
	m := regexp.MustCompile(`name="tokend_token" value="([^"]+)"`).FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("rendering = %d, no token field:\n%s", resp.StatusCode, page)
	}
	return m[1], page
}

// A visitor tops up its own account and no other, and sees no other's
// balance.
func TestOwnAccountOnly(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	same := http.Header{"Origin": {s.URL}}
	bob := signedIn(t, s, "bob")
	field, _ := rendering(t, s, bob)
	if resp := postFormAs(t, s, "/demo/topup/send", same, bob, url.Values{"tokend_token": {field}, "amount": {"7"}}); resp.StatusCode != http.StatusOK {
		t.Fatalf("bob tops up his own account = %d", resp.StatusCode)
	}

	alice := signedIn(t, s, "alice")
	for _, account := range [][]string{{"bob"}, {"alice", "bob"}, {"mallory"}} {
		field, _ := rendering(t, s, alice)
		resp := postFormAs(t, s, "/demo/topup/send", same, alice, url.Values{"tokend_token": {field}, "account": account, "amount": {"5"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("alice tops up account %q = %d, want 403", account, resp.StatusCode)
		}
	}
	if entries, balance := s.effects(t, "bob"); entries != 1 || balance != 7 {
		t.Errorf("%d ledger entries, bob's balance %d; want 1, 7", entries, balance)
	}
	_, page := rendering(t, s, alice)
	if strings.Contains(page, `name="account"`) || !contains(page, `<b>alice</b>`, `<b id="balance">0</b>`) {
		t.Errorf("alice's form offers another account or shows another balance:\n%s", page)
	}
	field, _ = rendering(t, s, alice)
	if resp := postFormAs(t, s, "/demo/topup/send", same, alice, url.Values{"tokend_token": {field}, "account": {"alice"}, "amount": {"5"}}); resp.StatusCode != http.StatusOK {
		t.Errorf("alice names her own account = %d, want 200", resp.StatusCode)
	}
	if _, balance := s.effects(t, "alice"); balance != 5 {
		t.Errorf("alice's balance %d, want 5", balance)
	}
}

func postFormAs(t *testing.T, s *server, path string, header http.Header, session *http.Cookie, v url.Values) *http.Response {
	t.Helper()
	h := header.Clone()
	h.Set("Cookie", session.String())
	return postForm(t, s, path, h, v)
}

// Every visitor, and every client address, has a rate: past it, pages are
// 429 with Retry-After, and no more tokens are issued. X-Forwarded-For does
// not buy a new address.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	slow := demo.RateLimit{PerSecond: 0.001, Burst: 3} // per hour, about 4
	fast := demo.RateLimit{PerSecond: 1000, Burst: 1000}

	t.Run("per visitor", func(t *testing.T) {
		t.Parallel()
		s := newServerWith(t, func(c *demo.Config) { c.VisitorLimit, c.IPLimit = slow, fast })
		alice := signedIn(t, s, "alice") // not yet a visitor: counts for the address only
		rendering(t, s, alice)           // two requests: the redirect and the page
		resp, body := getPage(t, s, "/demo/topup", alice)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("third request = %d, want 303", resp.StatusCode)
		}
		resp, body = getPage(t, s, resp.Header.Get("Location"), alice)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "Too many requests") {
			t.Errorf("fourth request = %d, Retry-After %q; want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if n := s.tokens(t); n != 1 {
			t.Errorf("%d tokens issued, want 1", n)
		}
		// Another visitor from the same address has a rate of its own.
		rendering(t, s, signedIn(t, s, "bob"))
	})
	t.Run("per address", func(t *testing.T) {
		t.Parallel()
		s := newServerWith(t, func(c *demo.Config) { c.VisitorLimit, c.IPLimit = fast, slow })
		for i := range 3 {
			signedIn(t, s, "visitor"+strconv.Itoa(i))
		}
		h := http.Header{"Origin": {s.URL}, "X-Forwarded-For": {"203.0.113.9"}}
		if resp := postForm(t, s, "/demo/signin", h, url.Values{"name": {"mallory"}}); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("fourth sign-in from the address = %d, want 429", resp.StatusCode)
		}
		if resp, _ := getPage(t, s, "/demo/static/style.css"); resp.StatusCode != http.StatusOK {
			t.Errorf("static file over the limit = %d, want 200: it costs nothing", resp.StatusCode)
		}
	})
}
