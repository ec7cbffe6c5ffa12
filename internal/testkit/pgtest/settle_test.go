package pgtest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestUnsettledNamesAnOpenTransaction: a transaction holding an id is named,
// with its process id, in the message a stalled feed test prints.
func TestUnsettledNamesAnOpenTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int
	var xid string
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), pg_current_xact_id()::text`).Scan(&pid, &xid); err != nil {
		t.Fatal(err)
	}
	if got := pgtest.Unsettled(pool); !strings.Contains(got, "pid "+strconv.Itoa(pid)+" ") || !strings.Contains(got, "xid "+xid) {
		t.Errorf("Unsettled = %q, want pid %d with xid %s named", got, pid, xid)
	}
}
