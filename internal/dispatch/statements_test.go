package dispatch

import (
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
)

// TestEveryStatementRuns: each of the package's statements runs on
// tokend's schema (pgtest.Runs), which on a Citus cluster
// (TOKEND_TEST_CITUS_DIR) proves Citus distributes it.
func TestEveryStatementRuns(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, map[string]string{
		"lock tenant": lockTenantSQL, "create": createSQL, "rotate": rotateSQL, "list": listSQL, "get": getSQL,
		"set enabled": setEnabledSQL, "delete": deleteSQL, "redeliver": redeliverSQL, "recent": recentSQL,
		"tenants": tenantsSQL, "behind": behindSQL, "fan out": fanOutSQL, "claim lock": claimLockSQL,
		"claim": claimSQL, "due tenants": dueTenantsSQL, "delivered": deliveredSQL, "failed": failedSQL, "undelivered": undeliveredSQL,
	})
}
