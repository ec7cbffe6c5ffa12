package contract_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tokend/tokend/internal/testkit/contract"
)

// recorder is a testing.TB that keeps what the checker reports.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const stats = `{"pending":0,"unknown":0,"oldest_pending_age_seconds":0,"oldest_unknown_age_seconds":0}`

// TestHandlerFailsWhatTheDocumentDoesNotDeclare serves canned answers and
// checks that each departure from the document fails the test, and that a
// conforming exchange does not.
func TestHandlerFailsWhatTheDocumentDoesNotDeclare(t *testing.T) {
	tests := []struct {
		name           string
		method, path   string
		body           string
		status         int
		header         http.Header
		answer         string
		wantErr        string // "" for a conforming exchange
		skipUndeclared bool
	}{
		{"conforming", "GET", "/v1/admin/stats", "", 200, nil, stats, "", false},
		{"undeclared status", "GET", "/v1/admin/stats", "", 418, nil, stats, "status is not supported", false},
		{"undeclared field", "GET", "/v1/admin/stats", "", 200, nil, strings.TrimSuffix(stats, "}") + `,"extra":1}`, `"extra"`, false},
		{"missing field", "GET", "/v1/admin/stats", "", 200, nil, `{"pending":0}`, "unknown", false},
		{"undeclared header", "GET", "/v1/admin/stats", "", 200, http.Header{"X-Secret": {"1"}}, stats, "X-Secret", false},
		{"declared header", "POST", "/v1/tokens/tok_1/unknown", `{"generation":1}`, 200, http.Header{"Idempotent-Replayed": {"true"}},
			`{"token_id":"tok_1","state":"unknown","generation":1}`, "", false},
		{"refused request answered 2xx", "POST", "/v1/tokens/tok_1/unknown", `{"generation":1,"extra":2}`, 200, nil,
			`{"token_id":"tok_1","state":"unknown","generation":1}`, "refuses the request", false},
		{"refused request answered 400", "POST", "/v1/tokens/tok_1/unknown", `{"generation":"one"}`, 400, nil,
			`{"type":"/problems/invalid_request","title":"Invalid request","status":400,"detail":"x","code":"invalid_request"}`, "", false},
		{"undeclared problem code", "GET", "/v1/admin/stats", "", 500, nil,
			`{"type":"/problems/oops","title":"x","status":500,"detail":"x","code":"oops"}`, "code", false},
		{"undeclared route answered 200", "GET", "/v1/nowhere", "", 200, nil, `{}`, "no such route", false},
		{"undeclared route answered 404", "GET", "/v1/nowhere", "", 404, nil,
			`{"type":"/problems/not_found","title":"Not found","status":404,"detail":"x","code":"not_found"}`, "", false},
		{"a test's own route", "GET", "/v1/mounted", "", 200, nil, `hello`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			var opts []contract.Option
			if tt.skipUndeclared {
				opts = append(opts, contract.SkipUndeclaredRoutes())
			}
			h := contract.Handler(rec, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tt.header {
					w.Header()[k] = vs
				}
				ct := "application/json"
				if tt.status >= 400 {
					ct = "application/problem+json"
				}
				w.Header().Set("Content-Type", ct)
				w.Header().Set("X-Request-Id", "r1")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.answer))
			}), opts...)
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer k")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tt.status || w.Body.String() != tt.answer {
				t.Errorf("the handler passed on %d %s, want %d %s", w.Code, w.Body, tt.status, tt.answer)
			}
			got := strings.Join(rec.errs, "\n")
			switch {
			case tt.wantErr == "" && got != "":
				t.Errorf("a conforming exchange failed:\n%s", got)
			case tt.wantErr != "" && !strings.Contains(got, tt.wantErr):
				t.Errorf("errors = %q, want one mentioning %q", got, tt.wantErr)
			}
		})
	}
}
