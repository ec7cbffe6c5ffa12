package store_test

import (
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestEveryTransitionRecordsItsEvent: each statement that changes a token
// is valid SQL on tokend's schema (Postgres prepares it, so names, types and
// parameter numbers all agree, and it runs, pgtest.Runs: on a Citus cluster
// this proves Citus distributes it) and writes exactly one event insert,
// whose xid is the token's event_xid; the other statements of the package
// run too.
func TestEveryTransitionRecordsItsEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	statements := map[string]string{
		"issue": store.Statements().IssueEventSQL, "forget": store.Statements().ForgetEventSQL,
		"sweep lapse, one tenant": store.SweepLapse.Tenant, "sweep expire, one tenant": store.SweepExpire.Tenant,
		"sweep purge, one tenant": store.SweepPurge.Tenant, "a read's expiry": store.Statements().ExpireReadSQL,
		"a read's expiry, bounded": store.Statements().ExpireReadBoundedSQL,
	}
	// A Step's change writes no event and its record one.
	steps := map[string]store.Step{
		"finish": store.Statements().FinishSQL, "lapse": store.Statements().LapseSQL, "lease": store.Statements().LeaseSQL, "finish lease": store.Statements().FinishLeaseSQL,
		"report unknown": store.Statements().ReportUnknownSQL, "revoke": store.Statements().RevokeSQL, "reconcile outcome": store.Statements().ReconcileOutcomeSQL,
		"reconcile not executed": store.Statements().ReconcileNotExecutedSQL,
	}
	for name, s := range steps {
		statements[name] = s.Record
		if strings.Contains(s.Change, "token_events") {
			t.Errorf("%s: the change writes an event:\n%s", name, s.Change)
		}
		if !strings.Contains(s.Change, "transition_id = $") {
			t.Errorf("%s: the change does not stamp its transition id:\n%s", name, s.Change)
		}
		if err := pgtest.Runs(t, pool, s.Change); err != nil {
			t.Errorf("%s's change: %v\n%s", name, err, s.Change)
		}
	}
	for name, sql := range statements {
		if n := strings.Count(sql, "INSERT INTO token_events"); n != 1 {
			t.Errorf("%s: %d event inserts, want 1:\n%s", name, n, sql)
		}
		// Without it the trigger reads the token's last event
		// (event.TestEventTakesItsXidFromTheTokensRow).
		if !strings.Contains(sql, "SELECT event_xid, ") && !strings.Contains(sql, "SELECT 0, event_xid, ") {
			t.Errorf("%s: the event's xid is not the token's event_xid (migration 022):\n%s", name, sql)
		}
		if err := pgtest.Runs(t, pool, sql); err != nil {
			t.Errorf("%s: %v\n%s", name, err, sql)
		}
	}
	// The locks, reads and deletes beside them write no event.
	for name, sql := range map[string]string{
		"lock": store.Statements().LockSQL, "report state": store.Statements().ReportStateSQL, "existing": store.Statements().ExistingSQL, "replay": store.Statements().ReplaySQL,
		"lock state": store.Statements().LockStateSQL, "delete events, one tenant": store.DeleteEvents.Tenant,
		"delete deliveries, one tenant": store.DeleteDeliveries.Tenant,
		"lapse tenants":                 store.SweepLapse.Tenants, "expire tenants": store.SweepExpire.Tenants,
		"purge tenants": store.SweepPurge.Tenants, "delete events tenants": store.DeleteEvents.Tenants,
		"delete deliveries tenants": store.DeleteDeliveries.Tenants,
		"unresolved":                store.Statements().UnresolvedSQL, "unresolved, one tenant": store.Statements().UnresolvedTenantSQL, "try lock": store.Statements().TryLockSQL,
		"bounded lock": store.Statements().LockBoundedSQL, "issue's insert": store.Statements().IssueSQL, "issue's policy check": store.Statements().PolicyCurrentSQL,
		"forget's delete": store.Statements().ForgetSQL, "get": store.Statements().GetSQL, "events": store.Statements().EventsSQL,
		"read again": store.Statements().RereadSQL,
	} {
		if strings.Contains(sql, "token_events (") {
			t.Errorf("%s writes an event", name)
		}
		if err := pgtest.Runs(t, pool, sql); err != nil {
			t.Errorf("%s: %v\n%s", name, err, sql)
		}
	}
	// Every list statement, one per state filter.
	for st, sql := range store.Statements().ListSQL {
		if err := pgtest.Runs(t, pool, sql); err != nil {
			t.Errorf("list %q: %v\n%s", st, err, sql)
		}
	}
	// A sweep's batch filters by its third parameter, its tenant.
	for _, s := range []store.Sweep{store.SweepLapse, store.SweepExpire, store.SweepPurge, store.DeleteEvents, store.DeleteDeliveries} {
		if !strings.Contains(s.Tenant, "tenant_id = $3") {
			t.Errorf("a sweep's batch without its tenant filter:\n%s", s.Tenant)
		}
	}
}
