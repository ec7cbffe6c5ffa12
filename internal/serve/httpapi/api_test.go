package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/ledgerapi"
	"github.com/tokend/tokend/internal/testkit/contract"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/token"
)

// api is a Server on a fresh database, with a client and an operator key for
// two tenants, acme and globex.
type api struct {
	t    *testing.T
	pool *pgxpool.Pool
	cfg  httpapi.Config
	srv  *httpapi.Server
	// handler is srv behind the contract check: every request a test sends
	// through do, and its answer, must be what the OpenAPI document says.
	handler http.Handler
	log     *syncBuffer
	keys    map[string]string // "acme/client" → secret
	keyIDs  map[string]string // "acme/client" → key id
}

func newAPI(t *testing.T, configure ...func(*httpapi.Config)) *api {
	t.Helper()
	return newAPIOn(t, ledgertest.NewPool(t), configure...)
}

func newAPIOn(t *testing.T, pool *pgxpool.Pool, configure ...func(*httpapi.Config)) *api {
	t.Helper()
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	a := &api{t: t, pool: pool, log: &syncBuffer{}, keys: map[string]string{}, keyIDs: map[string]string{}}
	cfg := httpapi.Config{
		Pool:    pool,
		Issuer:  k.Issuer,
		Spender: k.Spender,
		Logger:  slog.New(slog.NewJSONHandler(a.log, nil)),
	}
	for _, f := range configure {
		f(&cfg)
	}
	var opts []contract.Option
	if len(cfg.Mounts) > 0 {
		opts = append(opts, contract.SkipUndeclaredRoutes()) // the test's own routes
	}
	// The example ledger's read, mounted as tokend serve mounts it.
	cfg.Mounts = append([]httpapi.Mount{ledgerapi.Mount(pool)}, cfg.Mounts...)
	a.cfg = cfg
	var err error
	if a.srv, err = httpapi.New(cfg); err != nil {
		t.Fatal(err)
	}
	a.handler = contract.Handler(t, a.srv, opts...)
	return a
}

// key returns the secret of tenant's key with role, creating it on first use.
func (a *api) key(tenant string, role apikey.Role) string {
	a.t.Helper()
	name := tenant + "/" + string(role)
	if s, ok := a.keys[name]; ok {
		return s
	}
	k, secret, err := apikey.Create(context.Background(), a.pool, tenant, role)
	if err != nil {
		a.t.Fatalf("apikey.Create: %v", err)
	}
	a.keys[name], a.keyIDs[name] = secret, k.ID
	return secret
}

// client and operator are acme's keys.
func (a *api) client() string   { return a.key("acme", apikey.Client) }
func (a *api) operator() string { return a.key("acme", apikey.Operator) }

// request is one HTTP request to the API.
type request struct {
	method, path, key, body string
	header                  http.Header
}

// response is what came back, the body read once.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (a *api) do(r request) response {
	a.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req := httptest.NewRequest(r.method, r.path, body)
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func (a *api) get(key, path string) response {
	a.t.Helper()
	return a.do(request{method: http.MethodGet, path: path, key: key})
}

func (a *api) post(key, path, body string) response {
	a.t.Helper()
	return a.do(request{method: http.MethodPost, path: path, key: key, body: body})
}

// issue asks for a token for intent and fails the test unless it gets 201.
func (a *api) issue(key, intentID, body string) issued {
	a.t.Helper()
	res := a.do(request{method: http.MethodPost, path: "/v1/tokens", key: key, body: body, header: http.Header{"Idempotency-Key": {intentID}}})
	if res.status != http.StatusCreated {
		a.t.Fatalf("issue %s: %d %s", body, res.status, res.body)
	}
	var out issued
	mustUnmarshal(a.t, res.body, &out)
	out.raw = res
	return out
}

type issued struct {
	ID            string  `json:"id"`
	Token         string  `json:"token"`
	Operation     string  `json:"operation"`
	Subject       string  `json:"subject"`
	State         string  `json:"state"`
	ExpiresAt     string  `json:"expires_at"`
	PayloadDigest *string `json:"payload_digest"`
	raw           response
}

// problem is a problem+json body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// wantProblem fails the test unless res is a problem with status and code,
// and returns it.
func wantProblem(t *testing.T, res response, status int, code string) problem {
	t.Helper()
	var p problem
	if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, res.status, res.body)
		return p
	}
	mustUnmarshal(t, res.body, &p)
	if res.status != status || p.Status != status || p.Code != code || p.Title == "" || p.Detail == "" || p.Type == "" {
		t.Errorf("got %d %s, want a %d %s problem with type, title and detail", res.status, res.body, status, code)
	}
	if m := internalName.FindString(p.Detail); m != "" {
		t.Errorf("the detail %q says %q: an error chain of the server's, not what happened in the caller's words", p.Detail, m)
	}
	return p
}

// internalName finds what a problem's detail must not say: a Go package's
// error prefix ("dispatch: ", "intent: "; not one that is also a field's
// name, as in "token: is required") or Go's own error texts.
var internalName = regexp.MustCompile(`\b(?:admin|apikey|cache|consume|dispatch|httpapi|inspect|intent|jsonread|reqbody|store|webhookapi|pgx|pgconn|json|tokend): |context deadline|dial tcp|%!`)

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// tokenState reads a token's state and generation straight from the database.
func (a *api) tokenState(id string) (token.State, int64) {
	a.t.Helper()
	var (
		s token.State
		g int64
	)
	if err := a.pool.QueryRow(context.Background(), `SELECT state, generation FROM tokens WHERE id = $1`, id).Scan(&s, &g); err != nil {
		a.t.Fatalf("token %s: %v", id, err)
	}
	return s, g
}

// balance reads an account's balance straight from the database.
func (a *api) balance(tenant, account string) int64 {
	a.t.Helper()
	b, err := ledger.Balance(context.Background(), a.pool, tenant, account)
	if err != nil {
		a.t.Fatal(err)
	}
	return b
}

func (a *api) count(table string) int {
	a.t.Helper()
	var n int
	// table is a constant of the test, never input.
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		a.t.Fatal(err)
	}
	return n
}

// syncBuffer is a log sink tests read after the requests are done.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jsonLoose decodes b into v ignoring fields v does not name.
func jsonLoose(b []byte, v any) error { return json.Unmarshal(b, v) }

// issueRaw is an issue request whose answer the test looks at itself.
func (a *api) issueRaw(intentID, body string) response {
	a.t.Helper()
	return a.do(request{method: http.MethodPost, path: "/v1/tokens", key: a.client(), body: body, header: http.Header{"Idempotency-Key": {intentID}}})
}

// spendBody is the body of POST /v1/tokens/consume spending tok for
// operation and subject with payload (a JSON object).
func spendBody(tok issued, operation, subject, payload string) string {
	return fmt.Sprintf(`{"token":%q,"operation":%q,"subject":%q,"payload":%s}`, tok.Token, operation, subject, payload)
}

// credit issues a ledger.credit token with key and, if spend, spends it.
func (a *api) credit(key, intentID, subject string, spend bool) issued {
	a.t.Helper()
	tok := a.issue(key, intentID, fmt.Sprintf(`{"operation":"ledger.credit","subject":%q,"ttl_seconds":300,"payload":{"account":"acc_1","amount":1}}`, subject))
	if spend {
		res := a.post(key, "/v1/tokens/consume", spendBody(tok, "ledger.credit", subject, `{"account":"acc_1","amount":1}`))
		if res.status != http.StatusOK {
			a.t.Fatalf("consume: %d %s", res.status, res.body)
		}
	}
	return tok
}

// creditBody issues a ledger.credit of amount to account, its subject too.
func creditBody(account string, amount int) string {
	return fmt.Sprintf(`{"operation":"ledger.credit","subject":%q,"ttl_seconds":600,"payload":{"account":%q,"amount":%d}}`, account, account, amount)
}

// consumeBody spends tok as creditBody issued it.
func consumeBody(tok issued, account string, amount int) string {
	return spendBody(tok, "ledger.credit", account, fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount))
}
