package store

import "github.com/tokend/tokend/token"

// Texts are the package's statement texts, by the names they had when they
// were exported: for the tests that check them (each runs, on Citus too;
// their plans). Callers outside the tests run them through the package's
// typed functions only.
type Texts struct {
	APIKeyCreateSQL          string
	APIKeyListenSQL          string
	APIKeyLiveSQL            string
	APIKeyNotifySQL          string
	APIKeyResolveSQL         string
	APIKeyResolveUnroutedSQL string
	APIKeyRevokeSQL          string
	APIKeyRouteSQL           string
	BackendPIDSQL            string
	BehindSQL                string
	ClaimLockSQL             string
	ClaimLockTimeoutSQL      string
	ClaimTenantLockSQL       string
	ClaimPickSQL             string
	ClaimLeaseSQL            string
	DeliveredSQL             string
	DueTenantsSQL            string
	EndpointCreateSQL        string
	EndpointDeleteSQL        string
	EndpointGetSQL           string
	EndpointListSQL          string
	EndpointLockTenantSQL    string
	EndpointRotateSQL        string
	EndpointSetEnabledSQL    string
	EndpointResumeParkedSQL  string
	EndpointHurrySQL         string
	EventsSQL                string
	ExistingSQL              string
	ExpireReadSQL            string
	ExpireReadBoundedSQL     string
	FailedSQL                string
	FanOutSQL                string
	FinishLeaseSQL           Step
	FinishSQL                Step
	ForgetEventSQL           string
	ForgetSQL                string
	ForgetSignOutsSQL        string
	GetSQL                   string
	IssueEventSQL            string
	IssueSQL                 string
	LapseSQL                 Step
	LeaseSQL                 Step
	ListSQL                  map[token.State]string
	LockBoundedSQL           string
	LockHoldersSQL           string
	LockSQL                  string
	LockStateSQL             string
	PolicyCurrentSQL         string
	PolicyDeleteSQL          string
	PolicyGetSQL             string
	PolicyListSQL            string
	PolicyLockSQL            string
	PolicyPutSQL             string
	RecentDeliveriesSQL      string
	ReconcileNotExecutedSQL  Step
	ReconcileOutcomeSQL      Step
	RedeliverSQL             string
	ReplaySQL                string
	ReportStateSQL           string
	ReportUnknownSQL         Step
	RereadSQL                string
	RevokeSQL                Step
	SessionMarkSQL           string
	SessionReadSQL           string
	SignOutSQL               string
	SignedOutSQL             string
	TryLockSQL               string
	UndeliveredSQL           string
	UnresolvedSQL            string
	UnresolvedTenantSQL      string
	WebhookOnceSQL           string
	WebhookTenantsSQL        string

	BlockersSQL             string
	SuperuserSQL            string
	TablesSQL               string
	WebhookRequestAnswerSQL string
	WebhookRequestClaimSQL  string
	WebhookStatsSQL         string
	WebhookRequestForgetSQL string
	WebhookRequestGetSQL    string

	// The event feed's (event_exec.go).
	FeedHorizon, FeedRebase, FeedNotify, FeedLockHead, FeedPosition string
	FeedRead, FeedHead, FeedStall, FeedHeld                         string
}

// Statements answers the package's statement texts, for tests.
func Statements() Texts {
	return Texts{
		APIKeyCreateSQL:          apiKeyCreateSQL,
		APIKeyListenSQL:          apiKeyListenSQL,
		APIKeyLiveSQL:            apiKeyLiveSQL,
		APIKeyNotifySQL:          apiKeyNotifySQL,
		APIKeyResolveSQL:         apiKeyResolveSQL,
		APIKeyResolveUnroutedSQL: apiKeyResolveUnroutedSQL,
		APIKeyRevokeSQL:          apiKeyRevokeSQL,
		APIKeyRouteSQL:           apiKeyRouteSQL,
		BackendPIDSQL:            backendPIDSQL,
		BehindSQL:                behindSQL,
		ClaimLockSQL:             claimLockSQL,
		ClaimLockTimeoutSQL:      claimLockTimeoutSQL,
		ClaimTenantLockSQL:       claimTenantLockSQL,
		ClaimPickSQL:             claimPickSQL,
		ClaimLeaseSQL:            claimLeaseSQL,
		DeliveredSQL:             deliveredSQL,
		DueTenantsSQL:            dueTenantsSQL,
		EndpointCreateSQL:        endpointCreateSQL,
		EndpointDeleteSQL:        endpointDeleteSQL,
		EndpointGetSQL:           endpointGetSQL,
		EndpointListSQL:          endpointListSQL,
		EndpointLockTenantSQL:    endpointLockTenantSQL,
		EndpointRotateSQL:        endpointRotateSQL,
		EndpointSetEnabledSQL:    endpointSetEnabledSQL,
		EndpointResumeParkedSQL:  endpointResumeParkedSQL,
		EndpointHurrySQL:         endpointHurrySQL,
		EventsSQL:                eventsSQL,
		ExistingSQL:              existingSQL,
		ExpireReadSQL:            expireReadSQL,
		ExpireReadBoundedSQL:     expireReadBoundedSQL,
		FailedSQL:                failedSQL,
		FanOutSQL:                fanOutSQL,
		FinishLeaseSQL:           finishLeaseSQL,
		FinishSQL:                finishSQL,
		ForgetEventSQL:           forgetEventSQL,
		ForgetSQL:                forgetSQL,
		ForgetSignOutsSQL:        forgetSignOutsSQL,
		GetSQL:                   getSQL,
		IssueEventSQL:            issueEventSQL,
		IssueSQL:                 issueSQL,
		LapseSQL:                 lapseSQL,
		LeaseSQL:                 leaseSQL,
		ListSQL:                  listSQL,
		LockBoundedSQL:           lockBoundedSQL,
		LockHoldersSQL:           lockHoldersSQL,
		LockSQL:                  lockSQL,
		LockStateSQL:             lockStateSQL,
		PolicyCurrentSQL:         policyCurrentSQL,
		PolicyDeleteSQL:          policyDeleteSQL,
		PolicyGetSQL:             policyGetSQL,
		PolicyListSQL:            policyListSQL,
		PolicyLockSQL:            policyLockSQL,
		PolicyPutSQL:             policyPutSQL,
		RecentDeliveriesSQL:      recentDeliveriesSQL,
		ReconcileNotExecutedSQL:  reconcileNotExecutedSQL,
		ReconcileOutcomeSQL:      reconcileOutcomeSQL,
		RedeliverSQL:             redeliverSQL,
		ReplaySQL:                replaySQL,
		ReportStateSQL:           reportStateSQL,
		ReportUnknownSQL:         reportUnknownSQL,
		RereadSQL:                rereadSQL,
		RevokeSQL:                revokeSQL,
		SessionMarkSQL:           sessionMarkSQL,
		SessionReadSQL:           sessionReadSQL,
		SignOutSQL:               signOutSQL,
		SignedOutSQL:             signedOutSQL,
		TryLockSQL:               tryLockSQL,
		UndeliveredSQL:           undeliveredSQL,
		UnresolvedSQL:            unresolvedSQL,
		UnresolvedTenantSQL:      unresolvedTenantSQL,
		WebhookOnceSQL:           webhookOnceSQL,
		BlockersSQL:              blockersSQL,
		SuperuserSQL:             superuserSQL,
		TablesSQL:                tablesSQL,
		WebhookRequestAnswerSQL:  webhookRequestAnswerSQL,
		WebhookRequestClaimSQL:   webhookRequestClaimSQL,
		WebhookStatsSQL:          webhookStatsSQL,
		WebhookRequestForgetSQL:  webhookRequestForgetSQL,
		WebhookRequestGetSQL:     webhookRequestGetSQL,
		WebhookTenantsSQL:        webhookTenantsSQL,
		FeedHorizon:              feedHorizonSQL, FeedRebase: feedRebaseSQL, FeedNotify: feedNotifySQL,
		FeedLockHead: feedLockHeadSQL, FeedPosition: feedPositionSQL, FeedRead: feedReadSQL,
		FeedHead: feedHeadSQL, FeedStall: feedStallSQL, FeedHeld: feedHeldSQL,
	}
}
