package demo_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/demo"
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
