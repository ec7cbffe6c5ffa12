package console_test

import (
	"context"
	"github.com/tokend/tokend/internal/testkit/browsertest"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/console"
	"github.com/tokend/tokend/internal/serve/demo"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const (
	secretKey = "test-server-key-0123456789abcdef0123456789"
	tenant    = demo.DefaultTenant
	// leaseOp is an operation whose effect happens elsewhere, so that its
	// tokens can end up unknown.
	leaseOp = "payment.capture"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	code := m.Run()
	browsertest.Close()
	os.Exit(code)
}

// server is the demo app and the console on a database of their own.
type server struct {
	*httptest.Server
	pool        *pgxpool.Pool
	issuer      *intent.Issuer
	spender     *consume.Spender
	operatorKey string // an operator key of tenant

	mu      sync.Mutex
	changed []token.Record // what Config.Changed was told
}

// changes returns what Config.Changed was told so far.
func (s *server) changes() []token.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.changed)
}

// newServer starts the demo app and the console; configure, if any, changes
// the console's Config.
func newServer(t *testing.T, configure ...func(*console.Config)) *server {
	t.Helper()
	pool := ledgertest.NewPool(t)
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	s := &server{pool: pool, issuer: k.Issuer, spender: k.Spender, operatorKey: createKey(t, pool, tenant, apikey.Operator)}
	app, err := demo.New(demo.Config{Pool: pool, Issuer: s.issuer, Spender: k.Spender, SecretKey: secretKey})
	if err != nil {
		t.Fatal(err)
	}
	cfg := console.Config{Pool: pool, SecretKey: secretKey, Changed: func(_ context.Context, r token.Record) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.changed = append(s.changed, r)
	}}
	for _, f := range configure {
		f(&cfg)
	}
	cons, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	app.Mount(e)
	cons.Mount(e)
	cons.MountIndex(e, console.Link{Path: "/openapi.json", Name: "API reference", About: "the OpenAPI document."})
	s.Server = httptest.NewServer(e)
	t.Cleanup(s.Close)
	if _, err := operation.Put(t.Context(), pool, tenant, operation.Policy{Name: leaseOp, Mode: operation.Lease}, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func createKey(t *testing.T, pool *pgxpool.Pool, tenant string, role apikey.Role) string {
	t.Helper()
	_, key, err := apikey.Create(t.Context(), pool, tenant, role)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// issue issues a token of op for alice.
func (s *server) issue(t *testing.T, op string) intent.Issued {
	t.Helper()
	out, err := s.issuer.Issue(t.Context(), s.pool, intent.Request{
		Tenant: tenant, Operation: op, IntentID: token.NewID(), Subject: "alice", TTLSeconds: 600, Actor: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unknown returns a token whose lease holder could not tell what happened
// downstream.
func (s *server) unknown(t *testing.T) intent.Issued {
	t.Helper()
	iss := s.issue(t, leaseOp)
	resp, err := s.spender.Spend(t.Context(), s.pool, consume.Request{Tenant: tenant, Secret: iss.Secret, Operation: leaseOp, Subject: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := consume.Finish(t.Context(), s.pool, token.ReportUnknown, consume.Report{Tenant: tenant, TokenID: iss.Token.ID, Generation: resp.Lease.Generation, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return iss
}

// state returns the stored state of token id.
func (s *server) state(t *testing.T, id string) token.State {
	t.Helper()
	var st token.State
	if err := s.pool.QueryRow(t.Context(), `SELECT state FROM tokens WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// client is a browser without JavaScript, for the tests of what the console
// answers to requests a browser would not make.
type client struct {
	t      *testing.T
	s      *server
	cookie *http.Cookie
}

// do sends a request and returns the answer, without following redirects.
func (c *client) do(method, path string, header http.Header, form url.Values) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r, err := http.NewRequestWithContext(c.t.Context(), method, c.s.URL+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	r.Header = header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != nil {
		r.AddCookie(c.cookie)
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(r)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, string(b)
}

// sameOrigin is the header a browser sends with a POST of the console's pages.
func (c *client) sameOrigin() http.Header { return http.Header{"Origin": {c.s.URL}} }

// signIn signs in with key and keeps the session cookie.
func (c *client) signIn(key string) *http.Response {
	c.t.Helper()
	resp, _ := c.do(http.MethodPost, "/console/signin", c.sameOrigin(), url.Values{"key": {key}})
	for _, ck := range resp.Cookies() {
		if ck.Name == "tokend_console" {
			c.cookie = ck
		}
	}
	return resp
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the signed-in session, as its pages carry it.
func (c *client) csrf() string {
	c.t.Helper()
	_, body := c.do(http.MethodGet, "/console/tokens", nil, nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no CSRF token in the tokens page:\n%s", body)
	}
	return m[1]
}
