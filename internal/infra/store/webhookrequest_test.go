package store_test

import (
	"testing"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestWebhookRequestStatementsRun: the statements of idempotent webhook
// writes run (on a Citus cluster, distributed by tenant).
func TestWebhookRequestStatementsRun(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, map[string]string{
		"webhook request claim": store.Statements().WebhookRequestClaimSQL, "webhook request get": store.Statements().WebhookRequestGetSQL,
		"webhook request answer": store.Statements().WebhookRequestAnswerSQL, "webhook request forget": store.Statements().WebhookRequestForgetSQL,
	})
}
