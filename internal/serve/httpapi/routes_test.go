package httpapi_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/httpapi"
)

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
