package tokendtest_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/tokendtest"
)

// Each NewDB is a database of its own, migrated: a row one test writes is
// not in another's.
func TestNewDBIsolated(t *testing.T) {
	t.Parallel()
	a, b := tokendtest.NewDB(t), tokendtest.NewDB(t)
	if _, err := a.Exec(t.Context(), `INSERT INTO operations (tenant_id, name, mode) VALUES ('t', 'x.y', 'lease')`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(t.Context(), `SELECT count(*) FROM operations`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the other database has %d operations (%v), want 0", n, err)
	}
}

// TestNewDBHasTokendsSchemaOnly: a program's test database carries tokend's
// tables and none of the demo ledger's, unless the program passes the
// ledger's migrations as its own.
func TestNewDBHasTokendsSchemaOnly(t *testing.T) {
	t.Parallel()
	ledgerTables := func(db *pgxpool.Pool) int {
		var n int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'ledger\_%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := ledgerTables(tokendtest.NewDB(t)); n != 0 {
		t.Errorf("NewDB() has %d ledger tables, want none", n)
	}
	if n := ledgerTables(tokendtest.NewDB(t, ledger.Migrations)); n == 0 {
		t.Errorf("NewDB(ledger.Migrations) has no ledger tables")
	}
}
