package httpapi_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/logredact"
	"github.com/tokend/tokend/internal/serve/metrics"
)

// TestNoSecretInLogs: a token secret or an API key a client sends anywhere
// in its request line or headers (the path, the query, a header the server
// does not read, the Referer, a malformed Authorization) is redacted in
// every line the server logs: the access log, error lines and the panic
// recovery's. A secret in the URL is also counted and reported at WARN with
// the request id, never the value.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPI(t, func(cfg *httpapi.Config) {
		cfg.Metrics = m
		cfg.Mounts = append(cfg.Mounts, func(r httpapi.Routes) {
			// A handler bug that quotes what the client sent, twice: in
			// a panic and in an error it returns.
			r.Public.GET("/boom", func(c *gin.Context) { panic("cannot handle " + c.GetHeader("X-Token")) })
			r.Public.GET("/oops", func(c *gin.Context) {
				httpapi.Abort(c, fmt.Errorf("lookup %s: %w", c.Query("token"), errors.New("database down")))
			})
		})
	})
	key := a.client()
	issued := a.issue(key, "leak", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`)
	secret := issued.Token
	secrets := []string{secret, key}
	setupLog := len(a.log.String()) // the setup's own lines are not under test

	requests := []struct {
		name        string
		method      string
		target      string
		header      http.Header
		inURL       string // the part of the URL that holds a secret, if any
		wantStatus  int
		wantRequest bool // the request's own line must carry a marker
	}{
		{"secret in the path", "GET", "/v1/tokens/" + secret, http.Header{"Authorization": {"Bearer " + key}}, "path", 404, true},
		{"key in the path", "GET", "/nowhere/" + key, nil, "path", 404, true},
		{"secret in the query", "GET", "/v1/tokens/" + issued.ID + "?token=" + secret, http.Header{"Authorization": {"Bearer " + key}}, "query", 200, false},
		{"encoded secret in the query", "GET", "/healthz?t=" + strings.Replace(secret, "_", "%5F", 1), nil, "query", 200, false},
		{"key in a wrong header", "GET", "/v1/tokens/" + issued.ID, http.Header{"X-Token": {secret}, "X-Api-Key": {key}, "Authorization": {"Bearer " + key}}, "", 200, false},
		{"secret in the Referer", "GET", "/healthz", http.Header{"Referer": {"https://shop.example/pay?token=" + secret}}, "", 200, false},
		{"malformed Authorization", "GET", "/v1/tokens/" + issued.ID, http.Header{"Authorization": {"Token " + key + " " + secret}}, "", 401, false},
		{"secret as the key", "GET", "/v1/tokens/" + issued.ID, http.Header{"Authorization": {"Bearer " + secret}}, "", 401, false},
		{"panic quoting a header", "GET", "/boom", http.Header{"X-Token": {secret}}, "", 500, true},
		{"error quoting the query", "GET", "/oops?token=" + secret, nil, "query", 500, true},
	}
	for _, r := range requests {
		req := httptest.NewRequest(r.method, r.target, nil)
		for k, v := range r.header {
			req.Header[k] = v
		}
		req.Header.Set(httpapi.RequestIDHeader, "req-"+strings.ReplaceAll(r.name, " ", "-"))
		rec := httptest.NewRecorder()
		a.srv.ServeHTTP(rec, req)
		if rec.Code != r.wantStatus {
			t.Errorf("%s: status %d, want %d", r.name, rec.Code, r.wantStatus)
		}
	}

	logs := a.log.String()[setupLog:]
	for _, s := range secrets {
		// The prefix is no secret; what follows it is.
		if strings.Contains(logs, s[4:]) {
			t.Errorf("the log holds a secret (%s…):\n%s", s[:8], logs)
		}
	}
	type line struct {
		Level     string `json:"level"`
		Msg       string `json:"msg"`
		RequestID string `json:"request_id"`
		Path      string `json:"path"`
		Part      string `json:"part"`
		Error     string `json:"error"`
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var ln line
		if err := jsonLoose([]byte(l), &ln); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, ln)
	}
	find := func(id, msg string) (line, bool) {
		for _, l := range lines {
			if l.RequestID == id && l.Msg == msg {
				return l, true
			}
		}
		return line{}, false
	}
	for _, r := range requests {
		id := "req-" + strings.ReplaceAll(r.name, " ", "-")
		l, ok := find(id, "request")
		if !ok {
			t.Errorf("%s: no access log line", r.name)
			continue
		}
		if r.wantRequest && !strings.Contains(l.Path+l.Error, logredact.Marker) {
			t.Errorf("%s: the access line has no %s: %+v", r.name, logredact.Marker, l)
		}
		w, warned := find(id, "secret in URL")
		switch {
		case r.inURL != "" && (!warned || w.Level != "WARN" || w.Part != r.inURL):
			t.Errorf("%s: secret-in-URL line %+v (found %v), want a WARN naming %s", r.name, w, warned, r.inURL)
		case r.inURL == "" && warned:
			t.Errorf("%s: a secret-in-URL line for a URL without one", r.name)
		}
	}

	res := httptest.NewRecorder()
	a.srv.ServeHTTP(res, httptest.NewRequest("GET", "/metrics", nil))
	for part, want := range map[string]int{"path": 2, "query": 3} {
		series := fmt.Sprintf(`tokend_secret_in_url_total{part=%q} %d`, part, want)
		if !strings.Contains(res.Body.String(), series+"\n") {
			t.Errorf("/metrics has no %s", series)
		}
	}
	if strings.Contains(res.Body.String(), secret[4:]) || strings.Contains(res.Body.String(), key[4:]) {
		t.Error("/metrics holds a secret")
	}
}

// TestLoggerIsRedactedWhateverItIs: an embedder's logger is wrapped too, so
// the server's lines are redacted without tokend serve's setup.
func TestLoggerIsRedactedWhateverItIs(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	a := newAPI(t, func(cfg *httpapi.Config) { cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	secret := "tks_" + strings.Repeat("A", 43)
	a.get("", "/v1/tokens/"+secret)
	if out := buf.String(); strings.Contains(out, secret[4:]) || !strings.Contains(out, logredact.Marker) {
		t.Errorf("log = %s, want the secret redacted", out)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	wantProblem(t, a.get(a.client(), "/v2/tokens"), http.StatusNotFound, "not_found")
	wantProblem(t, a.get("", "/healthz/"), http.StatusNotFound, "not_found")
	wantProblem(t, a.get("", "/"), http.StatusNotFound, "not_found")

	res := a.do(request{method: http.MethodDelete, path: "/v1/tokens", key: a.client()})
	wantProblem(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
	if allow := res.header.Get("Allow"); allow != "POST" {
		t.Errorf("Allow = %q, want POST", allow)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, tt := range []struct{ sent, want string }{
		{"req-123.abc", "req-123.abc"},
		{"", ""},                       // made up
		{"bad id\nwith newline", ""},   // replaced
		{strings.Repeat("a", 129), ""}, // replaced
	} {
		res := a.do(request{method: http.MethodGet, path: "/healthz", header: http.Header{"X-Request-Id": {tt.sent}}})
		got := res.header.Get("X-Request-Id")
		if tt.want != "" && got != tt.want || tt.want == "" && (got == "" || got == tt.sent) {
			t.Errorf("sent %q, got X-Request-Id %q", tt.sent, got)
		}
		if !strings.Contains(a.log.String(), `"request_id":"`+got+`"`) {
			t.Errorf("request id %q is not in the log", got)
		}
	}
}

// TestMounts: route groups added from outside the package get the same
// authentication, limits and error answers as the built-in routes.
func TestMounts(t *testing.T) {
	t.Parallel()
	var seen atomic.Int64
	a := newAPI(t, func(c *httpapi.Config) {
		c.Middleware = []gin.HandlerFunc{func(c *gin.Context) { seen.Add(1); c.Next() }}
		c.Mounts = []httpapi.Mount{func(r httpapi.Routes) {
			r.Public.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
			r.Operator.POST("/echo", func(c *gin.Context) {
				var body struct {
					Reason string `json:"reason"`
				}
				if err := httpapi.Decode(c, &body); err != nil {
					httpapi.Abort(c, err)
					return
				}
				c.String(http.StatusOK, httpapi.Caller(c).Tenant+": "+body.Reason)
			})
		}}
	})

	if res := a.get("", "/hello"); res.status != http.StatusOK || string(res.body) != "hello" {
		t.Errorf("public mount = %d %s", res.status, res.body)
	}
	if res := a.post(a.operator(), "/v1/admin/echo", `{"reason":"audit"}`); res.status != http.StatusOK || string(res.body) != "acme: audit" {
		t.Errorf("operator mount = %d %s", res.status, res.body)
	}
	wantProblem(t, a.post(a.client(), "/v1/admin/echo", `{"reason":"audit"}`), http.StatusForbidden, "forbidden")
	wantProblem(t, a.post("", "/v1/admin/echo", `{"reason":"audit"}`), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, a.post(a.operator(), "/v1/admin/echo", `{"reason":"audit","tenant":"x"}`), http.StatusBadRequest, "invalid_request")
	wantProblem(t, a.post(a.operator(), "/v1/admin/echo", `{"reason":"`+strings.Repeat("x", httpapi.DefaultMaxBodyBytes)+`"}`), http.StatusRequestEntityTooLarge, "payload_too_large")
	wantProblem(t, a.get("", "/nowhere"), http.StatusNotFound, "not_found")
	if n := seen.Load(); n != 7 {
		t.Errorf("middleware saw %d requests, want 7", n)
	}
}

func TestPanicIsA500(t *testing.T) {
	t.Parallel()
	a := newAPI(t, func(c *httpapi.Config) {
		c.Mounts = []httpapi.Mount{func(r httpapi.Routes) {
			r.Client.GET("/boom", func(*gin.Context) { panic("kaboom") })
		}}
	})
	res := a.get(a.client(), "/v1/boom")
	p := wantProblem(t, res, http.StatusInternalServerError, "internal")
	if strings.Contains(p.Detail, "kaboom") || !strings.Contains(p.Detail, res.header.Get("X-Request-Id")) {
		t.Errorf("detail = %q: want the request id and not the cause", p.Detail)
	}
	if !containsAll(a.log.String(), "kaboom", `"status":500`) {
		t.Errorf("the panic is not in the log:\n%s", a.log.String())
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	tests := []struct {
		name string
		mod  func(*httpapi.Config)
	}{
		{"no pool", func(c *httpapi.Config) { c.Pool = nil }},
		{"no issuer", func(c *httpapi.Config) { c.Issuer = nil }},
		{"no spender", func(c *httpapi.Config) { c.Spender = nil }},
		{"negative body limit", func(c *httpapi.Config) { c.MaxBodyBytes = -1 }},
		{"check without ping", func(c *httpapi.Config) { c.Checks = []httpapi.Check{{Name: "redis"}} }},
		{"check named postgres", func(c *httpapi.Config) { c.Checks = []httpapi.Check{{Name: "postgres", Ping: a.pool.Ping}} }},
	}
	for _, tt := range tests {
		cfg := a.cfg
		tt.mod(&cfg)
		if _, err := httpapi.New(cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", tt.name)
		}
	}
	if _, err := httpapi.New(a.cfg); err != nil {
		t.Errorf("New(valid config) = %v", err)
	}
}
