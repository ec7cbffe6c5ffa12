package store_test

import (
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/internal/store"
)

// TestEveryStatementRuns: each statement of the package that is not on
// tokens (TestEveryTransitionRecordsItsEvent has those) runs (pgtest.Runs),
// which on a Citus cluster proves Citus distributes it.
func TestEveryStatementRuns(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, map[string]string{
		"policy get": store.PolicyGetSQL, "policy list": store.PolicyListSQL, "policy put": store.PolicyPutSQL,
		"policy lock": store.PolicyLockSQL, "policy delete": store.PolicyDeleteSQL,
	})
}
