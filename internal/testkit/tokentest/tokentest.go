// Package tokentest builds what most of tokend's tests start from: a
// migrated database of the test's own (pgtest), and an issuer and a spender
// wired to the test's handlers under a fixed test key. Tests that spend on
// the demo ledger start from ledgertest.New instead.
package tokentest

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// ServerKey is the server key a Kit's tokens derive from.
const ServerKey = "test-server-key-0123456789abcdef0123456789"

// Kit is a database with an issuer and a spender on it.
type Kit struct {
	Pool     *pgxpool.Pool
	Keys     *token.Keyring
	Handlers *consume.Registry
	Issuer   *intent.Issuer
	Spender  *consume.Spender
}

// Options changes what New builds. The zero value is the common case.
type Options struct {
	// Pool is the database; nil creates one for the test (pgtest.NewPool).
	Pool *pgxpool.Pool
	// Handlers the spender runs; nil is an empty registry (lease-mode
	// operations only).
	Handlers *consume.Registry
	// LockWait is the spender's consume.Config.LockWait.
	LockWait time.Duration
}

// Keys returns a keyring of ServerKey, for tests that build their own
// issuer or spender.
func Keys(t testing.TB) *token.Keyring {
	t.Helper()
	keys, err := token.NewKeyring(ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// New returns a Kit for t, built as o says.
func New(t testing.TB, o Options) *Kit {
	t.Helper()
	keys := Keys(t)
	var err error
	k := &Kit{Pool: o.Pool, Keys: keys, Handlers: o.Handlers}
	if k.Handlers == nil {
		k.Handlers = consume.NewRegistry()
	}
	if k.Spender, err = consume.New(consume.Config{Handlers: k.Handlers, Keys: keys, LockWait: o.LockWait}); err != nil {
		t.Fatal(err)
	}
	k.Issuer = intent.NewIssuer(keys, intent.WithHandlers(k.Handlers))
	if k.Pool == nil {
		k.Pool = pgtest.NewPool(t)
	}
	return k
}
