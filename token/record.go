package token

import "time"

// Record is a token as stored, without its secret.
type Record struct {
	Tenant         string
	ID             string
	Operation      string
	IntentID       string
	Subject        string
	State          State
	Generation     int64
	OperationID    string // set once a lease was granted
	PayloadDigest  []byte // nil when the token is not bound to a payload
	CreatedAt      time.Time
	ExpiresAt      time.Time
	RetainUntil    time.Time
	LeaseExpiresAt *time.Time
	FinishedAt     *time.Time
	ResultStatus   int    // 0 until an outcome is stored
	ResultBody     []byte // the stored response body, replayed byte for byte
}
