package form_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"html/template"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

const (
	tenant = "shop"
	// echoOp is an operation whose result is the payload it was given, as a
	// string, so that its bytes come back unchanged.
	echoOp = "test.echo"
)

// env is a fresh database with two protected forms: credit, a top-up on the
// ledger, and echo, whose result is its payload.
type env struct {
	pool    *pgxpool.Pool
	issuer  *intent.Issuer
	spender *consume.Spender
	credit  *form.Protector
	echo    *form.Protector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, consume.Config{})
}

func newEnvWith(t *testing.T, cfg consume.Config) *env {
	t.Helper()
	handlers := ledger.Handlers()
	handlers.Register(echoOp, consume.HandlerFunc(func(_ context.Context, _ pgx.Tx, c consume.Call) (consume.Outcome, error) {
		return consume.Outcome{Status: http.StatusOK, Result: string(c.Payload)}, nil
	}))
	k := ledgertest.New(t, tokentest.Options{Handlers: handlers, LockWait: cfg.LockWait})
	spender := k.Spender
	e := &env{pool: k.Pool, issuer: k.Issuer, spender: spender}
	if _, err := operation.Put(t.Context(), e.pool, tenant, operation.Policy{Name: echoOp, Mode: operation.Atomic}, spender.Handlers()); err != nil {
		t.Fatal(err)
	}
	e.credit = e.protector(t, ledger.Credit, creditPayload)
	e.echo = e.protector(t, echoOp, nil)
	return e
}

func (e *env) protector(t *testing.T, op string, payload func(url.Values) ([]byte, error)) *form.Protector {
	t.Helper()
	p, err := form.New(form.Config{Pool: e.pool, Issuer: e.issuer, Spender: e.spender, Tenant: tenant, Operation: op, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// creditPayload is the ledger's payload from a top-up form, whose amount is
// typed as text.
func creditPayload(f url.Values) ([]byte, error) {
	amount, err := strconv.ParseInt(f.Get("amount"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("amount: %w", err)
	}
	return json.Marshal(ledger.Payload{Account: f.Get("account"), Amount: amount})
}

// effects returns the number of ledger entries and acc_1's balance.
func (e *env) effects(t *testing.T) (entries, balance int64) {
	t.Helper()
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_entries`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	balance, err := ledger.Balance(t.Context(), e.pool, tenant, "acc_1")
	if err != nil {
		t.Fatal(err)
	}
	return entries, balance
}

func issue(t *testing.T, p *form.Protector, subject string) form.Field {
	t.Helper()
	f, err := p.Issue(get(t), subject)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return f
}

// get is the request for a page that names no rendering.
func get(t *testing.T) *http.Request {
	return httptest.NewRequest(http.MethodGet, "/topup?account=acc_1", nil).WithContext(t.Context())
}

// post is the submit of a form holding f and the fields kv (name, value, ...).
func post(t *testing.T, f form.Field, kv ...string) *http.Request {
	t.Helper()
	v := url.Values{}
	if f.Value() != "" {
		v.Set(form.FieldName, f.Value())
	}
	for i := 0; i < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	r := httptest.NewRequest(http.MethodPost, "/topup", strings.NewReader(v.Encode())).WithContext(t.Context())
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func TestResubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		submits [][]string // the fields of each submit of one rendering
	}{
		{"twice", [][]string{{"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "5"}}},
		{"five times", [][]string{
			{"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "5"},
			{"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "5"},
		}},
		// Back, change the amount, submit: still the first submit's result.
		// One rendering, one effect.
		{"changed values", [][]string{{"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "7"}}},
		{"values Config.Payload refuses", [][]string{{"account", "acc_1", "amount", "5"}, {"account", "acc_1", "amount", "seven"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := issue(t, e.credit, "alice")
			var first form.Result
			for i, fields := range tt.submits {
				res, err := e.credit.Spend(post(t, f, fields...), "alice")
				if err != nil {
					t.Fatalf("submit %d: %v", i, err)
				}
				if res.Replayed != (i > 0) {
					t.Errorf("submit %d: Replayed = %v, want %v", i, res.Replayed, i > 0)
				}
				if i == 0 {
					first = res
					continue
				}
				if res.Status != first.Status || !bytes.Equal(res.Body, first.Body) || res.TokenID != first.TokenID {
					t.Errorf("submit %d = %d %s, want the first's %d %s", i, res.Status, res.Body, first.Status, first.Body)
				}
			}
			if entries, balance := e.effects(t); entries != 1 || balance != 5 {
				t.Errorf("after %d submits: %d ledger entries, balance %d; want 1, 5", len(tt.submits), entries, balance)
			}
			var acc ledger.Account
			if err := first.Decode(&acc); err != nil || acc != (ledger.Account{Account: "acc_1", Balance: 5}) {
				t.Errorf("Decode = %+v, %v; want acc_1 with balance 5", acc, err)
			}
			if first.TokenID != f.TokenID || first.State != token.Consumed || first.Status != http.StatusOK {
				t.Errorf("first submit = %s %s %d, want %s consumed 200", first.TokenID, first.State, first.Status, f.TokenID)
			}
		})
	}
}

// A double click sends two submits at once: one runs, the other waits for it
// and replays it.
func TestConcurrentSubmits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := issue(t, e.credit, "alice")
	const n = 8
	results := make([]form.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = e.credit.Spend(post(t, f, "account", "acc_1", "amount", "3"), "alice")
		})
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if !results[i].Replayed {
			fresh++
		}
		if !bytes.Equal(results[i].Body, results[0].Body) {
			t.Errorf("submit %d body %s, submit 0 body %s; want equal", i, results[i].Body, results[0].Body)
		}
	}
	if fresh != 1 {
		t.Errorf("%d submits were carried out, want 1", fresh)
	}
	if entries, balance := e.effects(t); entries != 1 || balance != 3 {
		t.Errorf("%d ledger entries, balance %d; want 1, 3", entries, balance)
	}
}

// Two tabs are two renderings, two intents: both are carried out, and each
// replays its own outcome.
func TestTwoRenderings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tabs := []form.Field{issue(t, e.credit, "alice"), issue(t, e.credit, "alice")}
	if tabs[0].TokenID == tabs[1].TokenID {
		t.Fatalf("two renderings got the same token %s", tabs[0].TokenID)
	}
	var bodies [2][]byte
	for round := range 2 {
		for i, f := range tabs {
			res, err := e.credit.Spend(post(t, f, "account", "acc_1", "amount", "2"), "alice")
			if err != nil {
				t.Fatalf("round %d, tab %d: %v", round, i, err)
			}
			if round == 0 {
				bodies[i] = res.Body
			} else if !res.Replayed || !bytes.Equal(res.Body, bodies[i]) {
				t.Errorf("tab %d again = replayed %v, %s; want a replay of %s", i, res.Replayed, res.Body, bodies[i])
			}
		}
	}
	if bytes.Equal(bodies[0], bodies[1]) {
		t.Errorf("both tabs show %s, want each its own outcome", bodies[0])
	}
	if entries, balance := e.effects(t); entries != 2 || balance != 4 {
		t.Errorf("%d ledger entries, balance %d; want 2, 4", entries, balance)
	}
}

func TestStale(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// submit prepares the rendering f and returns its submit and who sends it.
		submit func(t *testing.T, e *env, f form.Field) (*http.Request, string)
		cause  error
	}{
		{"expired", func(t *testing.T, e *env, f form.Field) (*http.Request, string) {
			exec(t, e, `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, f.TokenID)
			return post(t, f, "account", "acc_1", "amount", "1"), "alice"
		}, token.ErrExpired},
		{"revoked", func(t *testing.T, e *env, f form.Field) (*http.Request, string) {
			if _, err := admin.Revoke(t.Context(), e.pool, tenant, f.TokenID, admin.Revocation{Reason: "test", Actor: "key_test"}); err != nil {
				t.Fatal(err)
			}
			return post(t, f, "account", "acc_1", "amount", "1"), "alice"
		}, token.ErrRevoked},
		{"purged", func(t *testing.T, e *env, f form.Field) (*http.Request, string) {
			exec(t, e, `DELETE FROM tokens WHERE id = $1`, f.TokenID)
			return post(t, f, "account", "acc_1", "amount", "1"), "alice"
		}, token.ErrNotFound},
		{"revoked, with refused values", func(t *testing.T, e *env, f form.Field) (*http.Request, string) {
			if _, err := admin.Revoke(t.Context(), e.pool, tenant, f.TokenID, admin.Revocation{Reason: "test", Actor: "key_test"}); err != nil {
				t.Fatal(err)
			}
			return post(t, f, "account", "acc_1", "amount", "one"), "alice"
		}, token.ErrRevoked},
		{"another user", func(t *testing.T, e *env, f form.Field) (*http.Request, string) {
			return post(t, f, "account", "acc_1", "amount", "1"), "mallory"
		}, consume.ErrBindingMismatch},
		{"another form's token", func(t *testing.T, e *env, _ form.Field) (*http.Request, string) {
			return post(t, issue(t, e.echo, "alice"), "account", "acc_1", "amount", "1"), "alice"
		}, consume.ErrBindingMismatch},
		{"no token field", func(t *testing.T, e *env, _ form.Field) (*http.Request, string) {
			return post(t, form.Field{}, "account", "acc_1", "amount", "1"), "alice"
		}, form.ErrNoToken},
		{"not a token", func(t *testing.T, e *env, _ form.Field) (*http.Request, string) {
			return post(t, form.Field{}, form.FieldName, "tks_guess", "account", "acc_1", "amount", "1"), "alice"
		}, form.ErrNoToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r, subject := tt.submit(t, e, issue(t, e.credit, "alice"))
			res, err := e.credit.Spend(r, subject)
			if !errors.Is(err, form.ErrStale) || !errors.Is(err, tt.cause) {
				t.Errorf("Spend = %+v, %v; want ErrStale and %v", res, err, tt.cause)
			}
			if entries, _ := e.effects(t); entries != 0 {
				t.Errorf("%d ledger entries, want 0", entries)
			}
		})
	}
}

func exec(t *testing.T, e *env, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// A refused submit leaves the token unspent: the corrected submit of the same
// rendering is carried out.
func TestInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		amount string
		cause  error // besides form.ErrInvalid; nil for the Payload func's own
	}{
		{"refused by Config.Payload", "ten", nil},
		{"refused by the handler", "0", consume.ErrInvalidPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := issue(t, e.credit, "alice")
			_, err := e.credit.Spend(post(t, f, "account", "acc_1", "amount", tt.amount), "alice")
			if !errors.Is(err, form.ErrInvalid) || tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Fatalf("Spend(amount %q) = %v, want ErrInvalid (and %v)", tt.amount, err, tt.cause)
			}
			if entries, _ := e.effects(t); entries != 0 {
				t.Errorf("refused submit: %d ledger entries, want 0", entries)
			}
			res, err := e.credit.Spend(post(t, f, "account", "acc_1", "amount", "4"), "alice")
			if err != nil || res.Replayed {
				t.Fatalf("corrected submit = replayed %v, %v; want carried out", res.Replayed, err)
			}
			if entries, balance := e.effects(t); entries != 1 || balance != 4 {
				t.Errorf("%d ledger entries, balance %d; want 1, 4", entries, balance)
			}
		})
	}
}

// The default payload is the form's fields, not the query string nor the
// token, whatever the encoding of the body.
func TestDefaultPayload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fields := [][2]string{{"b", "2"}, {"a", "1"}, {"tags", "x"}, {"tags", "y"}, {"note", "é <b>"}}
	const want = `{"a":"1","b":"2","note":"é <b>","tags":["x","y"]}`
	tests := []struct {
		name    string
		request func(f form.Field) *http.Request
	}{
		{"urlencoded", func(f form.Field) *http.Request {
			var kv []string
			for _, p := range fields {
				kv = append(kv, p[0], p[1])
			}
			r := post(t, f, kv...)
			r.URL.RawQuery = "q=query"
			return r
		}},
		{"multipart", func(f form.Field) *http.Request {
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			for _, p := range append([][2]string{{form.FieldName, f.Value()}}, fields...) {
				if err := mw.WriteField(p[0], p[1]); err != nil {
					t.Fatal(err)
				}
			}
			if err := mw.Close(); err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodPost, "/order?q=query", &body).WithContext(t.Context())
			r.Header.Set("Content-Type", mw.FormDataContentType())
			return r
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.echo.Spend(tt.request(issue(t, e.echo, "alice")), "alice")
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if err := res.Decode(&got); err != nil || got != want {
				t.Errorf("payload = %s, %v; want %s", got, err, want)
			}
		})
	}
}

func TestNoSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.credit.Issue(get(t), ""); !errors.Is(err, form.ErrNoSubject) {
		t.Errorf("Issue(no subject) = %v, want ErrNoSubject", err)
	}
	f := issue(t, e.credit, "alice")
	if _, err := e.credit.Spend(post(t, f, "account", "acc_1", "amount", "1"), ""); !errors.Is(err, form.ErrNoSubject) {
		t.Errorf("Spend(no subject) = %v, want ErrNoSubject", err)
	}
	var n int
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM tokens`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d tokens, %v; want only the one issued for alice", n, err)
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		ttl, want time.Duration
	}{
		{0, form.DefaultTTL},
		{90 * time.Second, 90 * time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
	}
	for _, tt := range tests {
		p, err := form.New(form.Config{Pool: e.pool, Issuer: e.issuer, Spender: e.spender, Tenant: tenant, Operation: ledger.Credit, TTL: tt.ttl})
		if err != nil {
			t.Fatal(err)
		}
		f := issue(t, p, "alice")
		var ttl int
		if err := e.pool.QueryRow(t.Context(), `SELECT ttl_seconds FROM tokens WHERE id = $1`, f.TokenID).Scan(&ttl); err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(ttl) * time.Second; got != tt.want {
			t.Errorf("TTL %v: token lives %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := form.Config{Pool: &pgxpool.Pool{}, Issuer: &intent.Issuer{}, Spender: &consume.Spender{}, Tenant: tenant, Operation: ledger.Credit}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name   string
		change func(c *form.Config)
	}{
		{"no pool", func(c *form.Config) { c.Pool = nil }},
		{"no issuer", func(c *form.Config) { c.Issuer = nil }},
		{"no spender", func(c *form.Config) { c.Spender = nil }},
		{"no tenant", func(c *form.Config) { c.Tenant = "" }},
		{"no operation", func(c *form.Config) { c.Operation = "" }},
		{"negative ttl", func(c *form.Config) { c.TTL = -time.Second }},
		{"ttl under a second", func(c *form.Config) { c.TTL = time.Millisecond }},
	}
	for _, tt := range tests {
		c := valid
		tt.change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate = nil, want an error", tt.name)
		}
		if p, err := form.New(c); err == nil || p != nil {
			t.Errorf("%s: New = %v, %v; want an error", tt.name, p, err)
		}
	}
}

func TestFieldHTML(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := issue(t, e.credit, "alice")
	want := `<input type="hidden" name="tokend_token" value="` + f.Value() + `">`
	if got := string(f.HTML()); got != want {
		t.Errorf("HTML = %s, want %s", got, want)
	}
	// In a template, the field is markup, not text to escape.
	tmpl := template.Must(template.New("").Parse(`<form method="post">{{ .HTML }}</form>`))
	var b strings.Builder
	if err := tmpl.Execute(&b, f); err != nil || b.String() != `<form method="post">`+want+`</form>` {
		t.Errorf("template = %s, %v", b.String(), err)
	}
	if !strings.HasPrefix(f.Value(), token.SecretPrefix) || !token.ValidID(f.TokenID) || !f.ExpiresAt.After(time.Now()) {
		t.Errorf("Field = %q %s %v, want a secret, a token id and a future expiry", f.Value(), f.TokenID, f.ExpiresAt)
	}
	if s := fmt.Sprintf("%v %+v %#v", f, f, f); strings.Contains(s, f.Value()) {
		t.Errorf("formatting a Field reveals its secret: %s", s)
	}
}

func TestResultDecode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body, want string
		ok         bool
	}{
		{`{"token_id":"tok_1","state":"consumed","result":{"n":1}}`, `{"n":1}`, true},
		{`{"token_id":"tok_1","state":"failed","error":{"code":"x"}}`, `{"code":"x"}`, true},
		{`{"token_id":"tok_1","state":"consumed"}`, ``, false},
		{`not json`, ``, false},
	}
	for _, tt := range tests {
		var got json.RawMessage
		err := form.Result{TokenID: "tok_1", Body: []byte(tt.body)}.Decode(&got)
		if (err == nil) != tt.ok || string(got) != tt.want {
			t.Errorf("Decode(%s) = %s, %v; want %s (ok %v)", tt.body, got, err, tt.want, tt.ok)
		}
	}
}

// A rendering named in the page's URL is the same token however often the
// page is fetched, and only for the user it was rendered for.
func TestRendering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	page := func(method, render string) *http.Request {
		return httptest.NewRequest(method, "/topup?"+form.RenderParam+"="+render, nil).WithContext(t.Context())
	}
	issueFor := func(r *http.Request, subject string) form.Field {
		t.Helper()
		f, err := e.credit.Issue(r, subject)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	const render = "AAAAAAAAAAAAAAAAAAAAAA"
	first := issueFor(page(http.MethodGet, render), "alice")
	tests := []struct {
		name    string
		r       *http.Request
		subject string
		same    bool
	}{
		{"the same rendering again", page(http.MethodGet, render), "alice", true},
		{"HEAD of it", page(http.MethodHead, render), "alice", true},
		{"another user's copy of the URL", page(http.MethodGet, render), "bob", false},
		{"another rendering", page(http.MethodGet, "BBBBBBBBBBBBBBBBBBBBBB"), "alice", false},
		{"a malformed name", page(http.MethodGet, "AAAA"), "alice", false},
		{"a name with stray bits", page(http.MethodGet, "AAAAAAAAAAAAAAAAAAAAAB"), "alice", false},
		{"no name", get(t), "alice", false},
		{"a refused POST's fresh form", page(http.MethodPost, render), "alice", false},
	}
	for _, tt := range tests {
		f := issueFor(tt.r, tt.subject)
		if same := f.TokenID == first.TokenID && f.Value() == first.Value(); same != tt.same {
			t.Errorf("%s: same token = %v, want %v", tt.name, same, tt.same)
		}
	}
}
