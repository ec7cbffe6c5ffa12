package token

import (
	"errors"
	"fmt"

	"github.com/tokend/tokend"
)

// ErrInvalidStatus means a status cannot be stored as a token's outcome.
var ErrInvalidStatus = errors.New("token: invalid outcome status")

// CheckOutcomeStatus reports whether status can be stored as the outcome of a
// token that moves to state to, and so be replayed byte for byte to every
// later spend: a consumed token needs a 2xx, a failed one a 4xx or 5xx, and
// neither may use a status that cannot carry a body (1xx, 204, 205, 304),
// since HTTP would drop the stored body on every replay. Every path that
// stores an outcome (an atomic handler, a lease holder's report, an
// operator's reconcile) checks it here. The error wraps ErrInvalidStatus.
func CheckOutcomeStatus(to State, status int) error {
	switch {
	case status < 100 || status > 599:
		return tokend.Invalid(ErrInvalidStatus, "status", fmt.Sprintf("%d is not an HTTP status (100-599)", status))
	case !carriesBody(status):
		return tokend.Invalid(ErrInvalidStatus, "status", fmt.Sprintf("%d cannot carry a body, and a stored outcome is replayed with its body", status))
	case to == Consumed && (status < 200 || status > 299):
		return tokend.Invalid(ErrInvalidStatus, "status", fmt.Sprintf("a consumed token's outcome needs a 2xx status, got %d", status))
	case to == Failed && status < 400:
		return tokend.Invalid(ErrInvalidStatus, "status", fmt.Sprintf("a failed token's outcome needs a 4xx or 5xx status, got %d", status))
	case to != Consumed && to != Failed:
		return tokend.Invalid(ErrInvalidStatus, "status", fmt.Sprintf("a %s token stores no outcome", to))
	}
	return nil
}

// carriesBody reports whether a response with status may have a body (RFC
// 9110 sections 15.2, 15.3.5, 15.3.6 and 15.4.5).
func carriesBody(status int) bool {
	switch {
	case status >= 100 && status <= 199,
		status == 204, status == 205, status == 304:
		return false
	}
	return true
}
