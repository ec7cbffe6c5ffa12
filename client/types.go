package client

import (
	"encoding/json"
	"time"
)

// These are the wire types of tokend's REST API, declared once: tokend
// answers with these very types (internal/serve/httpapi, internal/infra/dispatch), and
// its OpenAPI document (GET /openapi.json) describes the same JSON. The
// server writes every time in UTC with six fractional digits.

// Meta is what every result carries besides its body.
type Meta struct {
	// Replayed: tokend answered with what it had already answered or
	// recorded for this request (Idempotent-Replayed: true); nothing new
	// happened.
	Replayed bool
	// RequestID is the answer's X-Request-Id.
	RequestID string
	// Body is the answer's body as tokend sent it, for callers that keep
	// or forward it byte for byte.
	Body []byte
}

// State is a token's state.
type State string

// The states of a token.
const (
	Issued   State = "issued"
	Pending  State = "pending"
	Consumed State = "consumed"
	Failed   State = "failed"
	Unknown  State = "unknown"
	Revoked  State = "revoked"
	Expired  State = "expired"
)

// IssueRequest asks for a token for one business intent.
type IssueRequest struct {
	// IntentID names the business intent; it is sent as the Idempotency-Key.
	// Keep it when retrying, choose a new one only for a new intent. The
	// client never makes one up: Issue refuses an empty IntentID.
	IntentID   string `json:"-"`
	Operation  string `json:"operation"`
	Subject    string `json:"subject"`
	TTLSeconds int    `json:"ttl_seconds"`
	// Payload, when set, binds the token to this business payload: a spend
	// must send the same one. Any value encoding/json marshals.
	Payload any `json:"payload,omitempty"`
}

// IssuedToken is the answer to an issue: the token's handle and its secret.
type IssuedToken struct {
	Meta          `json:"-"`
	ID            string    `json:"id"`
	Token         string    `json:"token"` // the secret to spend; keep it like a password
	Operation     string    `json:"operation"`
	Subject       string    `json:"subject"`
	State         State     `json:"state"`
	ExpiresAt     time.Time `json:"expires_at"`
	PayloadDigest *string   `json:"payload_digest"`
}

// SpendRequest spends a token.
type SpendRequest struct {
	Token     string `json:"token"`
	Operation string `json:"operation"`
	Subject   string `json:"subject"`
	Payload   any    `json:"payload,omitempty"`
}

// Outcome is a spend's answer: the business outcome tokend stored for the
// token, the first time and on every replay. A handler's declared failure
// is an Outcome too (State Failed, Status its 4xx or 5xx), not an error.
type Outcome struct {
	Meta `json:"-"`
	// Status is the HTTP status tokend stored with the outcome.
	Status  int             `json:"-"`
	TokenID string          `json:"token_id"`
	State   State           `json:"state"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
	// Lease is set when the operation runs in lease mode (202): the caller
	// now holds the execution rights and must report what happened.
	Lease *Lease `json:"-"`
}

// leaseBody is a lease-mode spend's 202 answer.
type leaseBody struct {
	TokenID        string    `json:"token_id"`
	State          State     `json:"state"`
	Generation     int64     `json:"generation"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	OperationID    string    `json:"operation_id"`
}

// Recorded is tokend's answer to a lease holder's report: what it recorded.
type Recorded struct {
	Meta       `json:"-"`
	TokenID    string `json:"token_id"`
	State      State  `json:"state"`
	Generation int64  `json:"generation"`
	// Status is what later spends replay; zero for an unknown report.
	Status int `json:"status,omitempty"`
}

// Report is a lease holder's account of the downstream outcome.
type Report struct {
	Generation int64 `json:"generation"`
	// Status: complete, a 2xx (default 200); fail, a 4xx or 5xx (default 422).
	Status int `json:"status,omitempty"`
	// Result (complete) or Error (fail) is stored and replayed to later spends.
	Result any `json:"result,omitempty"`
	Error  any `json:"error,omitempty"`
}

// Token is what a client may read of a token: no secret, no outcome.
type Token struct {
	Meta           `json:"-"`
	ID             string     `json:"id"`
	Operation      string     `json:"operation"`
	Subject        string     `json:"subject"`
	State          State      `json:"state"`
	Generation     int64      `json:"generation"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      time.Time  `json:"expires_at"`
	OperationID    *string    `json:"operation_id"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	FinishedAt     *time.Time `json:"finished_at"`
}

// Account is a balance of the built-in ledger.credit demo business.
type Account struct {
	Meta    `json:"-"`
	Account string `json:"account"`
	Balance int64  `json:"balance"`
}

// Record is everything stored about a token, as operators see it.
type Record struct {
	Meta           `json:"-"`
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	Operation      string          `json:"operation"`
	Subject        string          `json:"subject"`
	IntentID       string          `json:"intent_id"`
	State          State           `json:"state"`
	Generation     int64           `json:"generation"`
	OperationID    *string         `json:"operation_id"`
	PayloadDigest  *string         `json:"payload_digest"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	RetainUntil    time.Time       `json:"retain_until"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	ResultStatus   *int            `json:"result_status"`
	ResultBody     json.RawMessage `json:"result_body"`
}

// Event is one entry of a token's audit trail.
type Event struct {
	Seq        int64           `json:"seq"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Kind       string          `json:"kind"`
	From       *State          `json:"from_state"` // nil for the issue
	To         State           `json:"to_state"`
	Generation int64           `json:"generation"`
	Detail     json.RawMessage `json:"detail"`
}

// TokenDetail is a token's record and its audit trail.
type TokenDetail struct {
	Record
	Events []Event `json:"events"`
}

// Filter selects tokens to list. Zero fields select everything.
type Filter struct {
	State         State
	Operation     string
	Subject       string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	Limit         int    // page size; zero is the server's default
	Cursor        string // where the page starts: a previous page's NextCursor
}

// Page is one page of a token listing.
type Page struct {
	Meta       `json:"-"`
	Items      []Record `json:"items"`
	NextCursor *string  `json:"next_cursor"` // nil on the last page
}

// Reconciliation is an operator's verdict on a token whose outcome is unknown.
type Reconciliation struct {
	Outcome string `json:"outcome"` // succeeded, not_executed or failed
	Status  int    `json:"status,omitempty"`
	Result  any    `json:"result,omitempty"`
}

// The outcomes a Reconciliation may give.
const (
	OutcomeSucceeded   = "succeeded"
	OutcomeNotExecuted = "not_executed"
	OutcomeFailed      = "failed"
)

// Purged is the answer to a purge: how many tokens it removed.
type Purged struct {
	Meta   `json:"-"`
	Purged int64 `json:"purged"`
}

// Policy is an operation's declaration. Declaring, zero fields are left
// out and take the server's defaults; tokend answers with every field, its
// defaults applied (a declared value is never zero, and IgnoredFields is
// [] rather than left out).
type Policy struct {
	Mode             string   `json:"mode"`                      // atomic or lease
	OnLeaseExpiry    string   `json:"on_lease_expiry,omitempty"` // unknown or takeover
	LeaseSeconds     int      `json:"lease_seconds,omitempty"`
	MaxTTLSeconds    int      `json:"max_ttl_seconds,omitempty"`
	RetentionSeconds int      `json:"retention_seconds,omitempty"`
	IgnoredFields    []string `json:"ignored_fields,omitzero"`
	// EventOutcome puts the stored outcome body in the events (feed and
	// webhooks) of tokens issued under this declaration.
	EventOutcome bool `json:"event_outcome"`
}

// Operation is a declared operation: its name and its policy.
type Operation struct {
	Meta `json:"-"`
	Name string `json:"name"`
	Policy
}

// Stats counts the tenant's tokens that wait for someone.
type Stats struct {
	Meta                    `json:"-"`
	Pending                 int64 `json:"pending"`
	Unknown                 int64 `json:"unknown"`
	OldestPendingAgeSeconds int64 `json:"oldest_pending_age_seconds"`
	OldestUnknownAgeSeconds int64 `json:"oldest_unknown_age_seconds"`
}
