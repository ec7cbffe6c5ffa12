package consume_test

import (
	"context"
	"testing"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// TestTransitionsCommitOnOneWorker: on Citus every transition of one token
// (an atomic spend with its ledger credit, a lease grant, its completion
// and a report of unknown, an operator's revoke) commits on the worker
// holding its tenant in one phase. A two-phase commit left an answered
// change invisible on a worker that restarted between the phases until
// Citus recovered it: a spend answered 200 while its token still read
// issued and its account's row stayed locked. Skipped on plain Postgres.
func TestTransitionsCommitOnOneWorker(t *testing.T) {
	pgtest.SkipUnlessCitus(t)
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.declareLease(operation.OnExpiryUnknown)
	atomic := e.issue(ledger.Credit, "alice", credit("alice", 10))
	completed := e.issue(payOp, "alice", map[string]any{"amount": 1})
	reported := e.issue(payOp, "bob", map[string]any{"amount": 1})
	revoked := e.issue(ledger.Credit, "alice", credit("alice", 3))
	pgtest.InOnePhase(t, e.pool, func() {
		if _, err := e.spender.Spend(ctx, e.pool, e.spendReq(atomic, credit("alice", 10))); err != nil {
			t.Fatal(err)
		}
		lease := e.grant(completed)
		if _, err := consume.Finish(ctx, e.pool, token.Complete, report(completed, lease.Generation, map[string]any{"ok": true})); err != nil {
			t.Fatal(err)
		}
		lease = e.grant(reported)
		if _, err := consume.Finish(ctx, e.pool, token.ReportUnknown, report(reported, lease.Generation, nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Revoke(ctx, e.pool, tenant, revoked.Token.ID, admin.Revocation{Reason: "test", Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
	})
	for id, want := range map[string]string{atomic.Token.ID: "consumed", completed.Token.ID: "consumed", reported.Token.ID: "unknown", revoked.Token.ID: "revoked"} {
		if got := e.state(id); string(got) != want {
			t.Errorf("token %s is %s, want %s", id, got, want)
		}
	}
	// Each token's issue and its transitions, one event each.
	var events int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM token_events`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if want := 4 + 1 + 2 + 2 + 1; events != want {
		t.Errorf("%d events, want %d", events, want)
	}
}
