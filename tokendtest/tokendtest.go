// Package tokendtest is the test kit for a Go program that embeds tokend:
// a database of the test's own, migrated to tokend's schema, and an issuer
// and a spender on it, wired to the program's handlers.
//
// Databases are made on the Postgres server TOKEND_TEST_DATABASE_URL names
// (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable),
// whose user may create databases. Each is a copy of a template migrated once
// per schema, so a test pays milliseconds for it, and is dropped when the
// test ends. The schema is tokend's alone, then the program's own
// migration sets when it passes them (migrations.Set, as the demo ledger's
// ledger.Migrations): the program's tables are in each database from the
// start, and the template is built once per schema.
package tokendtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
	"github.com/tokend/tokend/token"
)

// ServerKey is the server key a Kit's secrets are derived under. It is for
// tests only: never use it in a program.
const ServerKey = "tokendtest-server-key-0123456789abcdef01234"

// NewDB creates a database migrated to tokend's schema, then to the
// program's sets, for tb and returns a pool on it; both are closed and
// dropped when tb ends.
func NewDB(tb testing.TB, sets ...migrations.Set) *pgxpool.Pool {
	tb.Helper()
	return pgtest.NewPoolWith(tb, sets...)
}

// NewURL is NewDB's database without the pool: its connection URL.
func NewURL(tb testing.TB, sets ...migrations.Set) string {
	tb.Helper()
	return pgtest.NewURLWith(tb, sets...)
}

// NewEmptyURL creates a database with no schema at all for tb, dropped when
// tb ends, and returns its URL: for a test of the program's migrations.
func NewEmptyURL(tb testing.TB) string {
	tb.Helper()
	return pgtest.NewEmptyURL(tb)
}

// Kit is a database with an issuer and a spender on it.
type Kit struct {
	Pool     *pgxpool.Pool
	Keys     *token.Keyring // of ServerKey
	Handlers *consume.Registry
	Issuer   *intent.Issuer
	Spender  *consume.Spender
}

// New returns a Kit on a new database (NewDB, with sets) whose issuer and
// spender run handlers; nil means an empty registry (lease-mode operations
// only).
func New(tb testing.TB, handlers *consume.Registry, sets ...migrations.Set) *Kit {
	tb.Helper()
	if handlers == nil {
		handlers = consume.NewRegistry()
	}
	keys, err := token.NewKeyring(ServerKey)
	if err != nil {
		tb.Fatal(err)
	}
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		tb.Fatal(err)
	}
	return &Kit{
		Pool: NewDB(tb, sets...), Keys: keys, Handlers: handlers, Spender: spender,
		Issuer: intent.NewIssuer(keys, intent.WithHandlers(handlers)),
	}
}

// ForExample is New for an Example function, which has no testing.TB: it
// returns the Kit and the cleanup to defer. A step that fails panics, so the
// example fails rather than printing less.
func ForExample(handlers *consume.Registry, sets ...migrations.Set) (k *Kit, cleanup func()) {
	tb := &exampleTB{}
	defer func() {
		if r := recover(); r != nil {
			tb.cleanup()
			panic(r)
		}
	}()
	return New(tb, handlers, sets...), tb.cleanup
}

// exampleTB is the part of testing.TB that New uses, for an Example. Any
// other method panics (the embedded interface is nil).
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                      {}
func (e *exampleTB) Name() string                 { return "Example" }
func (e *exampleTB) Context() context.Context     { return context.Background() }
func (e *exampleTB) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
func (e *exampleTB) Log(a ...any)                 { fmt.Fprintln(os.Stderr, a...) }
func (e *exampleTB) Fatalf(format string, a ...any) {
	panic("tokendtest: " + fmt.Sprintf(format, a...))
}
func (e *exampleTB) Fatal(a ...any)                 { panic("tokendtest: " + fmt.Sprint(a...)) }
func (e *exampleTB) Errorf(format string, a ...any) { e.Fatalf(format, a...) }
func (e *exampleTB) Error(a ...any)                 { e.Fatal(a...) }

func (e *exampleTB) cleanup() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	e.cleanups = nil
}
