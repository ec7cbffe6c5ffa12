package ledger_test

import (
	"context"
	"io/fs"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
	"github.com/tokend/tokend/tokendtest"
)

// TestCoreSchemaHasNoLedgerTables: a program that applies tokend's
// migrations alone gets no ledger table; the ledger's set adds them.
func TestCoreSchemaHasNoLedgerTables(t *testing.T) {
	t.Parallel()
	conn := connect(t, tokendtest.NewEmptyURL(t))
	if _, err := migrations.Schema.Apply(t.Context(), conn); err != nil {
		t.Fatal(err)
	}
	if got := ledgerTables(t, conn); got != 0 {
		t.Fatalf("tokend's schema alone has %d ledger tables, want none", got)
	}
	files, err := fs.Glob(os.DirFS("migrations"), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ledger.Migrations.Apply(t.Context(), conn); err != nil || n != len(files) {
		t.Fatalf("ledger migrations: applied %d, %v; want the %d files of migrations/", n, err, len(files))
	}
	if got := ledgerTables(t, conn); got != 2 {
		t.Fatalf("after the ledger's set: %d ledger tables, want 2", got)
	}
}

// TestUpgradeKeepsLedgerRows: a database at the schema before the ledger
// left it (006) keeps its balances and entries through the upgrade, and the
// ledger's set adopts the tables; without rows, they are dropped and made
// again.
func TestUpgradeKeepsLedgerRows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rows bool
	}{{"with rows", true}, {"empty", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			conn, _ := pgtest.ConnAt(t, 6)
			if tc.rows {
				if _, err := conn.Exec(ctx, `
					INSERT INTO ledger_accounts (tenant_id, account, balance) VALUES ('acme', 'alice', 70);
					INSERT INTO ledger_entries (tenant_id, token_id, account, amount) VALUES ('acme', 'tok_1', 'alice', 70)`); err != nil {
					t.Fatal(err)
				}
			}
			var oid1 uint32
			if err := conn.QueryRow(ctx, `SELECT 'ledger_accounts'::regclass::oid`).Scan(&oid1); err != nil {
				t.Fatal(err)
			}
			for _, set := range []migrations.Set{migrations.Schema, ledger.Migrations} {
				if _, err := set.Apply(ctx, conn); err != nil {
					t.Fatal(err)
				}
			}
			var oid2 uint32
			var balance, entries int64
			if err := conn.QueryRow(ctx, `SELECT 'ledger_accounts'::regclass::oid,
				(SELECT coalesce(sum(balance), 0) FROM ledger_accounts), (SELECT count(*) FROM ledger_entries)`).Scan(&oid2, &balance, &entries); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.rows && (balance != 70 || entries != 1 || oid1 != oid2):
				t.Fatalf("balance %d, %d entries, table kept %v; want 70, 1, kept", balance, entries, oid1 == oid2)
			case !tc.rows && oid1 == oid2:
				t.Fatalf("the empty ledger table was left in tokend's schema, not dropped and made again by the ledger's set")
			}
		})
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func ledgerTables(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'ledger%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
