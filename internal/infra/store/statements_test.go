package store_test

import (
	"context"
	"testing"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestEveryStatementRuns: each statement of the package that is not on
// tokens (TestEveryTransitionRecordsItsEvent has those) runs (pgtest.Runs),
// which on a Citus cluster proves Citus distributes it.
func TestEveryStatementRuns(t *testing.T) {
	t.Parallel()
	pgtest.RunsAll(t, map[string]string{
		"policy get": store.PolicyGetSQL, "policy list": store.PolicyListSQL, "policy put": store.PolicyPutSQL,
		"policy lock": store.PolicyLockSQL, "policy delete": store.PolicyDeleteSQL,
		"api key create": store.APIKeyCreateSQL, "api key resolve": store.APIKeyResolveSQL, "api key route": store.APIKeyRouteSQL, "api key resolve unrouted": store.APIKeyResolveUnroutedSQL, "api key revoke": store.APIKeyRevokeSQL,
		"api key notify": store.APIKeyNotifySQL, "api key live": store.APIKeyLiveSQL,
		"endpoint lock tenant": store.EndpointLockTenantSQL, "endpoint create": store.EndpointCreateSQL,
		"endpoint rotate": store.EndpointRotateSQL, "endpoint list": store.EndpointListSQL, "endpoint get": store.EndpointGetSQL,
		"endpoint set enabled": store.EndpointSetEnabledSQL, "endpoint delete": store.EndpointDeleteSQL,
		"redeliver": store.RedeliverSQL, "recent deliveries": store.RecentDeliveriesSQL, "webhook tenants": store.WebhookTenantsSQL,
		"behind": store.BehindSQL, "fan out": store.FanOutSQL, "claim lock": store.ClaimLockSQL, "claim lock timeout": store.ClaimLockTimeoutSQL, "claim": store.ClaimSQL,
		"lock holders": store.LockHoldersSQL, "session mark": store.SessionMarkSQL, "backend pid": store.BackendPIDSQL,
		"session read": store.SessionReadSQL, "sign out": store.SignOutSQL, "forget sign-outs": store.ForgetSignOutsSQL,
		"signed out":  store.SignedOutSQL,
		"due tenants": store.DueTenantsSQL, "delivered": store.DeliveredSQL, "failed": store.FailedSQL, "undelivered": store.UndeliveredSQL,
	})
}

// TestWebhookOnceRuns: the consumer's dedup statement runs on the table
// its schema creates.
func TestWebhookOnceRuns(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(context.Background(), store.WebhookEventsSchema); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Runs(t, pool, store.WebhookOnceSQL); err != nil {
		t.Errorf("webhook once: %v", err)
	}
}
