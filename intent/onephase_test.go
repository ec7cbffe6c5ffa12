package intent_test

import (
	"context"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"testing"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/operation"
)

// TestIssueCommitsOnOneWorker: on Citus an issue, on the pool or in a
// transaction, with a declared operation or a built-in one, commits on the
// worker holding its tenant in one phase. Citus records each two-phase
// commit in pg_dist_transaction until its recovery has finished it; a
// worker restarting between the two phases left an issued token invisible
// (its spend answered 404) until then. Skipped on plain Postgres.
func TestIssueCommitsOnOneWorker(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	t.Parallel()
	pool, is, ctx := ledgertest.NewPool(t), newIssuer(t), context.Background()
	if _, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: "shop.checkout", Mode: operation.Lease}, nil); err != nil {
		t.Fatal(err)
	}
	pgtest.InOnePhase(t, pool, func() {
		declared := request("declared")
		declared.Operation = "shop.checkout"
		if _, err := is.Issue(ctx, pool, declared); err != nil {
			t.Fatal(err)
		}
		if _, err := is.Issue(ctx, pool, request("built-in")); err != nil {
			t.Fatal(err)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		if _, err := is.IssueTx(ctx, tx, request("in a transaction")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	})
	if n := count(t, pool, `SELECT count(*) FROM tokens`); n != 3 {
		t.Errorf("%d tokens, want 3", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM token_events WHERE kind = 'issued'`); n != 3 {
		t.Errorf("%d issue events, want 3", n)
	}
}
