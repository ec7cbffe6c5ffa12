package pgtest_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

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
	// Other tests' transactions (a CREATE or DROP DATABASE) may be older
	// than this one for a while: it stays open, so it becomes one of the
	// five oldest once they end. The bound is a hang bound.
	named := func(got string) bool {
		return strings.Contains(got, "pid "+strconv.Itoa(pid)+" ") && strings.Contains(got, "xid "+xid)
	}
	got := pgtest.Unsettled(pool)
	for deadline := time.Now().Add(pgtest.SettleTimeout); !named(got) && time.Now().Before(deadline); got = pgtest.Unsettled(pool) {
		time.Sleep(100 * time.Millisecond)
	}
	if !named(got) {
		t.Errorf("Unsettled = %q, want pid %d with xid %s named", got, pid, xid)
	}
}
