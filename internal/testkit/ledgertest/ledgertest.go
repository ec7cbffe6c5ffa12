// Package ledgertest is what the tests that spend on the demo ledger
// (example/ledger) start from: pgtest's databases with the ledger's tables
// too, and tokentest's Kit with the ledger's handlers. The test kits
// themselves know nothing of the demo.
package ledgertest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// NewPool is pgtest.NewPool with the ledger's tables.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPoolWith(t, ledger.Migrations)
}

// NewURL is pgtest.NewURL with the ledger's tables.
func NewURL(t testing.TB) string {
	t.Helper()
	return pgtest.NewURLWith(t, ledger.Migrations)
}

// New is tokentest.New on a database with the ledger's tables (unless
// o.Pool is given) whose spender runs the ledger's handlers (unless
// o.Handlers is given).
func New(t testing.TB, o tokentest.Options) *tokentest.Kit {
	t.Helper()
	if o.Handlers == nil {
		o.Handlers = ledger.Handlers()
	}
	if o.Pool == nil {
		o.Pool = NewPool(t)
	}
	return tokentest.New(t, o)
}
