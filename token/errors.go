package token

import "errors"

// Errors about a token's standing, shared by every package that looks one up
// or moves it. Callers test for them with errors.Is.
var (
	// ErrNotFound: no such token for this tenant. Another tenant's token and
	// a purged token are reported the same way.
	ErrNotFound = errors.New("token: not found")
	// ErrExpired: the token's expiry has passed (by the database clock).
	ErrExpired = errors.New("token: expired")
	// ErrRevoked: an operator revoked the token.
	ErrRevoked = errors.New("token: revoked")
	// ErrInProgress: another holder is executing it; retry later.
	ErrInProgress = errors.New("token: in progress")
	// ErrOutcomeUnknown: execution started and its outcome is unknown until
	// an operator reconciles it.
	ErrOutcomeUnknown = errors.New("token: outcome unknown")
	// ErrStaleGeneration: the caller holds execution rights that were since
	// granted to someone else.
	ErrStaleGeneration = errors.New("token: stale generation")
	// ErrInvalidState: the action is not allowed in the token's state.
	ErrInvalidState = errors.New("token: invalid state")
)
