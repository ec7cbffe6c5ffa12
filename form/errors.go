package form

import "errors"

// Errors of Issue and Spend. Spend's errors also match the token package's
// error that caused them (token.ErrExpired, token.ErrRevoked, ...), so a page
// can say which it was.
var (
	// ErrNoSubject: there is no signed-in user. A form is protected per user,
	// so a token is neither issued nor spent without one.
	ErrNoSubject = errors.New("form: no subject")
	// ErrNoToken: the submitted form carries no token field, or one that
	// cannot be a token. It is wrapped in ErrStale.
	ErrNoToken = errors.New("form: no token in the submitted form")
	// ErrStale: the submitted form can no longer be carried out, and nothing
	// was done. Its token expired, was revoked, was purged, derives from a
	// retired server key, belongs to another user or form, or is missing.
	// Show a fresh form.
	ErrStale = errors.New("form: stale form")
	// ErrInvalid: the submitted values were refused before anything was
	// done. The token is still unspent.
	ErrInvalid = errors.New("form: invalid submission")
)
