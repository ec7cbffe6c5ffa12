package ledger_test

import (
	"testing"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestEveryStatementRuns: each of the ledger's statements runs
// (pgtest.Runs), which on a Citus cluster (TOKEND_TEST_CITUS_DIR) proves
// Citus distributes it.
func TestEveryStatementRuns(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, ledger.Statements, ledger.Migrations)
}
