package store_test

import (
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/internal/store"
)

// TestEveryTransitionRecordsItsEvent: each statement that changes a token
// is valid SQL on tokend's schema (Postgres prepares it, so names, types and
// parameter numbers all agree) and writes exactly one event insert; the
// other statements of the package prepare too.
func TestEveryTransitionRecordsItsEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	statements := map[string]string{
		"issue": store.IssueSQL, "forget": store.ForgetSQL, "finish": store.FinishSQL, "lapse": store.LapseSQL,
		"lease": store.LeaseSQL, "finish lease": store.FinishLeaseSQL, "report unknown": store.ReportUnknownSQL,
		"revoke": store.RevokeSQL, "reconcile outcome": store.ReconcileOutcomeSQL,
		"reconcile not executed": store.ReconcileNotExecutedSQL,
		"sweep lapse":            store.SweepLapse.All, "sweep lapse, one tenant": store.SweepLapse.Tenant,
		"sweep expire": store.SweepExpire.All, "sweep expire, one tenant": store.SweepExpire.Tenant,
		"sweep purge": store.SweepPurge.All, "sweep purge, one tenant": store.SweepPurge.Tenant,
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, sql := range statements {
		if n := strings.Count(sql, "INSERT INTO token_events"); n != 1 {
			t.Errorf("%s: %d event inserts, want 1:\n%s", name, n, sql)
		}
		if _, err := conn.Conn().Prepare(t.Context(), "", sql); err != nil {
			t.Errorf("%s: %v\n%s", name, err, sql)
		}
	}
	// The locks, reads and deletes beside them write no event.
	for name, sql := range map[string]string{
		"lock": store.LockSQL, "report state": store.ReportStateSQL, "existing": store.ExistingSQL, "replay": store.ReplaySQL,
		"lock state": store.LockStateSQL, "delete events": store.DeleteEvents.All, "delete events, one tenant": store.DeleteEvents.Tenant,
		"delete deliveries": store.DeleteDeliveries.All, "delete deliveries, one tenant": store.DeleteDeliveries.Tenant,
		"unresolved": store.UnresolvedSQL, "unresolved, one tenant": store.UnresolvedTenantSQL, "try lock": store.TryLockSQL,
		"bounded lock": store.LockBoundedSQL,
	} {
		if strings.Contains(sql, "token_events (") {
			t.Errorf("%s writes an event", name)
		}
		if _, err := conn.Conn().Prepare(t.Context(), "", sql); err != nil {
			t.Errorf("%s: %v\n%s", name, err, sql)
		}
	}
	// The one-tenant form of a sweep filters by its third parameter.
	if !strings.Contains(store.SweepExpire.Tenant, "tenant_id = $3") || strings.Contains(store.SweepExpire.All, "$3") {
		t.Errorf("sweep forms:\n%s\n%s", store.SweepExpire.All, store.SweepExpire.Tenant)
	}
}
