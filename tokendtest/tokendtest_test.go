package tokendtest_test

import (
	"testing"

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
