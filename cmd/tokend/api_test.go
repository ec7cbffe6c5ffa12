package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// The demo app, where anyone may sign in and have tokens issued, is served
// only when TOKEND_DEMO (or --demo) turns it on; the console always is, and
// / answers a page that links to what is served.
func TestDemoOnlyWhenTurnedOn(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	keys := tokentest.Keys(t)
	handlers := consume.NewRegistry()
	ledger.Register(handlers)
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		demo bool
	}{
		{"default", nil, nil, false},
		{"TOKEND_DEMO=1", nil, map[string]string{"TOKEND_DEMO": "1"}, true},
		{"TOKEND_DEMO=true", nil, map[string]string{"TOKEND_DEMO": "true"}, true},
		{"TOKEND_DEMO=0", nil, map[string]string{"TOKEND_DEMO": "0"}, false},
		{"--demo", []string{"--demo"}, nil, true},
		{"--demo=false over TOKEND_DEMO=1", []string{"--demo=false"}, map[string]string{"TOKEND_DEMO": "1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg serveConfig
			if err := parseFlags("serve", tt.args, func(k string) string { return tt.env[k] }, io.Discard, cfg.bind); err != nil {
				t.Fatal(err)
			}
			cfg.SecretKey = tokentest.ServerKey
			hooks, err := dispatch.New(dispatch.Config{Pool: pool, Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			api, release, err := newAPI(t.Context(), cfg, pool, pool, keys, spender, hooks, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			do := func(method, path string, form url.Values) int {
				r := httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.Header.Set("Origin", "http://example.com")
				w := httptest.NewRecorder()
				api.ServeHTTP(w, r)
				return w.Code
			}
			wantDemo := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[tt.demo]
			if got := do(http.MethodGet, "/demo/signin", nil); got != wantDemo {
				t.Errorf("GET /demo/signin = %d, want %d", got, wantDemo)
			}
			wantSignin := map[bool]int{true: http.StatusSeeOther, false: http.StatusNotFound}[tt.demo]
			if got := do(http.MethodPost, "/demo/signin", url.Values{"name": {"mallory"}}); got != wantSignin {
				t.Errorf("POST /demo/signin = %d, want %d", got, wantSignin)
			}
			if got := do(http.MethodGet, "/console/signin", nil); got != http.StatusOK {
				t.Errorf("GET /console/signin = %d, want 200 either way", got)
			}
			w := httptest.NewRecorder()
			api.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
			index := w.Body.String()
			if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") ||
				!strings.Contains(index, `href="/console"`) || !strings.Contains(index, `href="/openapi.json"`) || strings.Contains(index, `href="/demo"`) != tt.demo {
				t.Errorf("GET / = %d %s, want an HTML page linking to the console, the API and, only when on, the demo:\n%s", w.Code, w.Header().Get("Content-Type"), index)
			}
		})
	}
}
