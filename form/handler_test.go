package form_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/token"
)

// page is what a Pages method was asked to render.
type page struct {
	kind    string // "form", "result" or "error"
	status  int
	field   form.Field
	problem error
	result  form.Result
}

// pages records the page of each request, and writes the field's value into
// the form page as a browser would find it.
type pages struct {
	mu   sync.Mutex
	last page
}

func (p *pages) Form(w http.ResponseWriter, _ *http.Request, status int, f form.Field, problem error) {
	p.record(page{kind: "form", status: status, field: f, problem: problem})
	w.WriteHeader(status)
	w.Write([]byte(f.HTML()))
}

func (p *pages) Result(w http.ResponseWriter, _ *http.Request, res form.Result) {
	p.record(page{kind: "result", status: res.Status, result: res})
	w.WriteHeader(res.Status)
	w.Write(res.Body)
}

func (p *pages) Error(w http.ResponseWriter, _ *http.Request, status int, err error) {
	p.record(page{kind: "error", status: status, problem: err})
	http.Error(w, err.Error(), status)
}

func (p *pages) record(pg page) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = pg
}

// serve sends r as user (none when empty) and returns the rendered page.
func (p *pages) serve(t *testing.T, h http.Handler, r *http.Request, user string) (page, *httptest.ResponseRecorder) {
	t.Helper()
	if user != "" {
		r.Header.Set("X-User", user)
	}
	p.record(page{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.Code != p.last.status {
		t.Errorf("%s %s answered %d, the page was rendered with %d", r.Method, r.URL, w.Code, p.last.status)
	}
	return p.last, w
}

func userHeader(r *http.Request) string { return r.Header.Get("X-User") }

func TestHandler(t *testing.T) {
	gin.SetMode(gin.TestMode)
	t.Parallel()
	handlers := []struct {
		name string
		new  func(p *form.Protector, pg form.Pages) http.Handler
	}{
		{"net/http", func(p *form.Protector, pg form.Pages) http.Handler {
			return p.Handler(pg, userHeader)
		}},
		{"gin", func(p *form.Protector, pg form.Pages) http.Handler {
			g := gin.New()
			g.Use(func(c *gin.Context) { c.Set("user", userHeader(c.Request)) })
			h := p.GinHandler(pg, func(c *gin.Context) string { return c.GetString("user") })
			g.GET("/topup", h)
			g.POST("/topup", h)
			return g
		}},
	}
	for _, hh := range handlers {
		t.Run(hh.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			pg := &pages{}
			h := hh.new(e.credit, pg)

			w := httptest.NewRecorder()
			first := get(t)
			first.Header.Set("X-User", "alice")
			h.ServeHTTP(w, first)
			loc, err := url.Parse(w.Header().Get("Location"))
			if w.Code != http.StatusSeeOther || err != nil || loc.Path != "/topup" || loc.Query().Get(form.RenderParam) == "" || loc.Query().Get("account") != "acc_1" {
				t.Fatalf("GET /topup?account=acc_1 = %d to %q, want 303 to a rendering of its own, query kept", w.Code, w.Header().Get("Location"))
			}
			page := httptest.NewRequest(http.MethodGet, loc.String(), nil).WithContext(t.Context())
			shown, w := pg.serve(t, h, page, "alice")
			if shown.kind != "form" || shown.status != http.StatusOK || shown.problem != nil {
				t.Fatalf("GET = %+v, want the form", shown)
			}
			if cc := w.Header().Get("Cache-Control"); cc != "private, no-cache" {
				t.Errorf("form page Cache-Control = %q, want private, no-cache (never no-store: Back must restore the token)", cc)
			}
			f := shown.field
			again, _ := pg.serve(t, h, httptest.NewRequest(http.MethodGet, loc.String(), nil).WithContext(t.Context()), "alice")
			if again.field.TokenID != f.TokenID || again.field.Value() != f.Value() {
				t.Errorf("GET of the same rendering again = token %s, want the same token %s", again.field.TokenID, f.TokenID)
			}

			for i, wantReplayed := range []bool{false, true} {
				shown, _ = pg.serve(t, h, post(t, f, "account", "acc_1", "amount", "6"), "alice")
				if shown.kind != "result" || shown.status != http.StatusOK || shown.result.Replayed != wantReplayed {
					t.Errorf("submit %d = %+v, want the result, replayed %v", i, shown, wantReplayed)
				}
			}

			shown, _ = pg.serve(t, h, post(t, f, "account", "acc_1", "amount", "six"), "alice")
			if shown.kind != "result" || !shown.result.Replayed {
				t.Errorf("submit with changed values = %+v, want the replayed result", shown)
			}

			f2 := issue(t, e.credit, "alice")
			exec(t, e, `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, f2.TokenID)
			shown, _ = pg.serve(t, h, post(t, f2, "account", "acc_1", "amount", "6"), "alice")
			if shown.kind != "form" || shown.status != http.StatusConflict || !errors.Is(shown.problem, token.ErrExpired) ||
				shown.field.TokenID == "" || shown.field.TokenID == f2.TokenID {
				t.Errorf("expired submit = %+v, want a fresh form with token.ErrExpired", shown)
			}

			f3 := issue(t, e.credit, "alice")
			shown, _ = pg.serve(t, h, post(t, f3, "account", "acc_1", "amount", "-1"), "alice")
			if shown.kind != "form" || shown.status != http.StatusUnprocessableEntity || !errors.Is(shown.problem, form.ErrInvalid) {
				t.Errorf("invalid submit = %+v, want the form again with ErrInvalid", shown)
			}

			shown, _ = pg.serve(t, h, post(t, f3, "account", "acc_1", "amount", "1"), "")
			if shown.kind != "error" || shown.status != http.StatusUnauthorized || !errors.Is(shown.problem, form.ErrNoSubject) {
				t.Errorf("submit without a user = %+v, want an error page, 401", shown)
			}

			if entries, balance := e.effects(t); entries != 1 || balance != 6 {
				t.Errorf("%d ledger entries, balance %d; want 1, 6", entries, balance)
			}
		})
	}
}

func TestHandlerMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pg := &pages{}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPut, "/topup", strings.NewReader("")).WithContext(t.Context())
	r.Header.Set("X-User", "alice")
	e.credit.Handler(pg, userHeader).ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD, POST" || pg.last.kind != "" {
		t.Errorf("PUT = %d, Allow %q, page %q; want 405 and no page", w.Code, w.Header().Get("Allow"), pg.last.kind)
	}
}

// While another submit of the form holds its token, a submit that gives up
// waiting gets an error page, never a fresh form: a fresh form's submit could
// run the effect a second time.
func TestHandlerInProgress(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, consume.Config{LockWait: 50 * time.Millisecond})
	pg := &pages{}
	h := e.credit.Handler(pg, userHeader)
	f := issue(t, e.credit, "alice")

	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM tokens WHERE tenant_id = $1 AND id = $2 FOR UPDATE`, tenant, f.TokenID); err != nil {
		t.Fatal(err)
	}
	shown, w := pg.serve(t, h, post(t, f, "account", "acc_1", "amount", "1"), "alice")
	if shown.kind != "error" || shown.status != http.StatusConflict || !errors.Is(shown.problem, token.ErrInProgress) || w.Header().Get("Retry-After") == "" {
		t.Errorf("submit while another holds the token = %+v, Retry-After %q; want an error page, 409, Retry-After", shown, w.Header().Get("Retry-After"))
	}
	var tokens int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM tokens`).Scan(&tokens); err != nil || tokens != 1 {
		t.Errorf("%d tokens, %v; want 1: no fresh form was issued", tokens, err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	shown, _ = pg.serve(t, h, post(t, f, "account", "acc_1", "amount", "1"), "alice")
	if shown.kind != "result" || shown.result.Replayed {
		t.Errorf("submit once the lock is gone = %+v, want the fresh result", shown)
	}
}
