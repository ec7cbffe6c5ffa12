package demo_test

import (
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/serve/demo"
	"github.com/tokend/tokend/internal/testkit/browsertest"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/token"
)

const secretKey = "test-server-key-0123456789abcdef0123456789"

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	code := m.Run()
	browsertest.Close()
	os.Exit(code)
}

// server is the demo app on a database of its own, served over HTTP.
type server struct {
	*httptest.Server
	pool *pgxpool.Pool
}

// newServer serves the demo app under /demo, behind middleware.
func newServer(t *testing.T, middleware ...gin.HandlerFunc) *server {
	t.Helper()
	return newServerWith(t, func(*demo.Config) {}, middleware...)
}

// newServerWith is newServer with the app's config changed by configure.
func newServerWith(t *testing.T, configure func(*demo.Config), middleware ...gin.HandlerFunc) *server {
	t.Helper()
	pool := ledgertest.NewPool(t)
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	cfg := demo.Config{Pool: pool, Issuer: k.Issuer, Spender: k.Spender, SecretKey: secretKey}
	configure(&cfg)
	app, err := demo.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.Use(middleware...)
	app.Mount(e)
	s := &server{Server: httptest.NewServer(e), pool: pool}
	t.Cleanup(s.Close)
	return s
}

// effects returns the number of ledger entries and the balance of account.
func (s *server) effects(t *testing.T, account string) (entries, balance int64) {
	t.Helper()
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_entries`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	balance, err := ledger.Balance(t.Context(), s.pool, demo.DefaultTenant, account)
	if err != nil {
		t.Fatal(err)
	}
	return entries, balance
}

// expire moves the expiry of the token whose secret is a form's field value
// into the past.
func (s *server) expire(t *testing.T, secret string) {
	t.Helper()
	tag, err := s.pool.Exec(t.Context(), `UPDATE tokens SET expires_at = now() - interval '1 second' WHERE secret_hash = $1`, token.Secret(secret).Hash())
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire: %v rows, %v", tag.RowsAffected(), err)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// tokens returns the number of tokens issued.
func (s *server) tokens(t *testing.T) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM tokens`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
