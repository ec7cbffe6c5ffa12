package form_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

// TestHandlerRetiredKey: after the server key of a form's token is retired,
// a submit of it is refused like a stale form (a fresh form, nothing done),
// and reloading its rendering starts a new one instead of failing.
func TestHandlerRetiredKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pg := &pages{}
	rendering := "/topup?account=acc_1&" + form.RenderParam + "=AAAAAAAAAAAAAAAAAAAAAA"
	shown, _ := pg.serve(t, e.credit.Handler(pg, userHeader), httptest.NewRequest(http.MethodGet, rendering, nil).WithContext(t.Context()), "alice")
	if shown.kind != "form" {
		t.Fatalf("GET = %+v, want the form", shown)
	}
	old := shown.field

	keys, err := token.NewKeyring("a-new-server-key-after-the-leak-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	handlers := ledger.Handlers()
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	p, err := form.New(form.Config{Pool: e.pool, Issuer: intent.NewIssuer(keys, intent.WithHandlers(handlers)), Spender: spender, Tenant: tenant, Operation: ledger.Credit, Payload: creditPayload})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Handler(pg, userHeader)

	shown, _ = pg.serve(t, h, post(t, old, "account", "acc_1", "amount", "6"), "alice")
	if shown.kind != "form" || !errors.Is(shown.problem, form.ErrStale) || !errors.Is(shown.problem, token.ErrKeyRetired) ||
		shown.field.TokenID == "" || shown.field.TokenID == old.TokenID {
		t.Errorf("submit after retirement = %+v, want a fresh form with token.ErrKeyRetired", shown)
	}
	if entries, balance := e.effects(t); entries != 0 || balance != 0 {
		t.Errorf("%d ledger entries, balance %d after a refused submit; want 0, 0", entries, balance)
	}

	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, rendering, nil).WithContext(t.Context())
	r.Header.Set("X-User", "alice")
	h.ServeHTTP(w, r)
	loc, err := url.Parse(w.Header().Get("Location"))
	if w.Code != http.StatusSeeOther || err != nil || loc.Query().Get(form.RenderParam) == "" || loc.String() == rendering {
		t.Fatalf("reload after retirement = %d to %q, want 303 to a new rendering", w.Code, w.Header().Get("Location"))
	}
	shown, _ = pg.serve(t, h, httptest.NewRequest(http.MethodGet, loc.String(), nil).WithContext(t.Context()), "alice")
	if shown.kind != "form" || shown.field.TokenID == old.TokenID {
		t.Fatalf("new rendering = %+v, want a form with a new token", shown)
	}
}
