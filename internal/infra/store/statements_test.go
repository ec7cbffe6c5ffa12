package store_test

import (
	"context"
	"reflect"
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
		"policy get": store.Statements().PolicyGetSQL, "policy list": store.Statements().PolicyListSQL, "policy put": store.Statements().PolicyPutSQL,
		"policy lock": store.Statements().PolicyLockSQL, "policy delete": store.Statements().PolicyDeleteSQL,
		"api key create": store.Statements().APIKeyCreateSQL, "api key resolve": store.Statements().APIKeyResolveSQL, "api key route": store.Statements().APIKeyRouteSQL, "api key resolve unrouted": store.Statements().APIKeyResolveUnroutedSQL, "api key revoke": store.Statements().APIKeyRevokeSQL,
		"api key notify": store.Statements().APIKeyNotifySQL, "api key live": store.Statements().APIKeyLiveSQL,
		"endpoint lock tenant": store.Statements().EndpointLockTenantSQL, "endpoint create": store.Statements().EndpointCreateSQL,
		"endpoint rotate": store.Statements().EndpointRotateSQL, "endpoint list": store.Statements().EndpointListSQL, "endpoint get": store.Statements().EndpointGetSQL,
		"endpoint set enabled": store.Statements().EndpointSetEnabledSQL, "endpoint resume parked": store.Statements().EndpointResumeParkedSQL, "endpoint hurry": store.Statements().EndpointHurrySQL,
		"endpoint delete": store.Statements().EndpointDeleteSQL,
		"redeliver":       store.Statements().RedeliverSQL, "recent deliveries": store.Statements().RecentDeliveriesSQL, "webhook tenants": store.Statements().WebhookTenantsSQL,
		"behind": store.Statements().BehindSQL, "fan out": store.Statements().FanOutSQL, "claim lock": store.Statements().ClaimLockSQL, "claim lock timeout": store.Statements().ClaimLockTimeoutSQL, "claim tenant lock": store.Statements().ClaimTenantLockSQL, "claim pick": store.Statements().ClaimPickSQL, "claim lease": store.Statements().ClaimLeaseSQL,
		"lock holders": store.Statements().LockHoldersSQL, "session mark": store.Statements().SessionMarkSQL, "backend pid": store.Statements().BackendPIDSQL,
		"session read": store.Statements().SessionReadSQL, "sign out": store.Statements().SignOutSQL, "forget sign-outs": store.Statements().ForgetSignOutsSQL,
		"signed out": store.Statements().SignedOutSQL,
		"tables":     store.Statements().TablesSQL, "blockers": store.Statements().BlockersSQL, "superuser": store.Statements().SuperuserSQL,
		"due tenants": store.Statements().DueTenantsSQL, "delivered": store.Statements().DeliveredSQL, "failed": store.Statements().FailedSQL, "undelivered": store.Statements().UndeliveredSQL,
		"webhook stats": store.Statements().WebhookStatsSQL,
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
	if err := pgtest.Runs(t, pool, store.Statements().WebhookOnceSQL); err != nil {
		t.Errorf("webhook once: %v", err)
	}
}

// TestStatementsAreAllSet: every text Statements answers is set, so that no
// statement test checks an empty string in place of the statement it names.
func TestStatementsAreAllSet(t *testing.T) {
	v := reflect.ValueOf(store.Statements())
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.String && f.String() == "" {
			t.Errorf("store.Statements().%s is empty", v.Type().Field(i).Name)
		}
	}
}
