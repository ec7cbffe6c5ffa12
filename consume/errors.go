package consume

import (
	"errors"

	"github.com/tokend/tokend/token"
)

// Errors of a spend, besides the token package's (token.ErrNotFound,
// token.ErrExpired, token.ErrRevoked, token.ErrInProgress,
// token.ErrOutcomeUnknown, ...) and operation.ErrUnknown.
var (
	// ErrBindingMismatch: the spend names another subject or operation than
	// the token was issued for.
	ErrBindingMismatch = errors.New("consume: token bound to another subject or operation")
	// ErrPayloadMismatch: the payload differs from the one the token is bound to.
	ErrPayloadMismatch = errors.New("consume: payload differs from the one the token was issued for")
	// ErrPayloadMissing: the token is bound to a payload and the spend
	// carries none.
	ErrPayloadMissing = errors.New("consume: the token is bound to a payload and the spend carries none")
	// ErrNoHandler: the operation is atomic but this process has no handler for it.
	ErrNoHandler = errors.New("consume: no handler registered for operation")
	// ErrReportConflict: a lease holder's report differs from the one
	// already recorded for its generation.
	ErrReportConflict = errors.New("consume: a different report was already recorded")
)

// InProgressError is returned (it matches token.ErrInProgress) while another
// holder executes the token; RetryAfterSeconds is a hint for when to try again.
type InProgressError struct {
	RetryAfterSeconds int
}

func (e *InProgressError) Error() string { return "token: in progress" }

// Is makes errors.Is(err, token.ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == token.ErrInProgress }

// KeyRetiredError is returned (it matches token.ErrKeyRetired) when the
// spent token's secret was derived under a server key the Spender's keyring
// no longer holds. Nothing was changed. TokenID and KeyID, neither of them
// secret, tell an operator which token and which retired key were tried.
type KeyRetiredError struct {
	TokenID string
	KeyID   string
}

func (e *KeyRetiredError) Error() string {
	return "consume: token " + e.TokenID + ": " + token.ErrKeyRetired.Error() + " " + e.KeyID
}

// Is makes errors.Is(err, token.ErrKeyRetired) true.
func (e *KeyRetiredError) Is(target error) bool { return target == token.ErrKeyRetired }
