package operation_test

import (
	"testing"

	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/operation"
)

// TestEveryStatementRuns: each of the package's statements runs
// (pgtest.Runs), which on a Citus cluster (TOKEND_TEST_CITUS_DIR) proves
// Citus distributes it.
func TestEveryStatementRuns(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, operation.Statements)
}
