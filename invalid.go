package tokend

import (
	"errors"
	"fmt"
)

// InvalidInputError is an input refused before anything was written, with
// the input it names and why, in the API's words: Field "ttl_seconds",
// Reason "must be a positive integer". Every invalid-input refusal of
// tokend's packages can be read as one with errors.As, a handler's
// *consume.PayloadError included; it also matches its package's sentinel
// (Kind: intent.ErrInvalidRequest, admin.ErrInvalidRequest,
// operation.ErrInvalid, inspect.ErrInvalidFilter, consume.ErrInvalidPayload,
// token.ErrInvalidPayload, token.ErrInvalidStatus, token.ErrMalformedSecret,
// token.ErrInvalidText) with errors.Is, and the cause it wraps (Err).
type InvalidInputError struct {
	// Kind is the sentinel the refusal matches with errors.Is.
	Kind error
	// Field names the refused input: a request member ("ttl_seconds"), a
	// dotted path into a payload ("payload.amount"), or a header
	// ("Idempotency-Key"). Empty when the input as a whole is refused.
	Field string
	// Reason says what is wrong with Field: "must be a positive integer".
	Reason string
	// Err is the refusal this one wraps, if any.
	Err error
}

// Invalid returns an *InvalidInputError of kind for field.
func Invalid(kind error, field, reason string) error {
	return &InvalidInputError{Kind: kind, Field: field, Reason: reason}
}

// InvalidWith returns an *InvalidInputError of kind that wraps err, a
// refusal from further down (a payload's, a text field's). Its field and
// reason are err's, read as an *InvalidInputError, its field prefixed with
// field ("payload" and "amount" give "payload.amount"); an err that is not
// one gives its text as the reason.
func InvalidWith(kind error, field string, err error) error {
	e := &InvalidInputError{Kind: kind, Field: field, Err: err}
	var inner *InvalidInputError
	if errors.As(err, &inner) {
		e.Field = joinField(field, inner.Field)
		e.Reason = inner.Reason
	} else if err != nil {
		e.Reason = err.Error()
	}
	return e
}

func joinField(outer, inner string) string {
	switch {
	case outer == "":
		return inner
	case inner == "":
		return outer
	}
	return outer + "." + inner
}

// Error returns Kind's text and the detail.
func (e *InvalidInputError) Error() string {
	if e.Kind == nil {
		return e.Detail()
	}
	return e.Kind.Error() + ": " + e.Detail()
}

// Detail is Field and Reason as the API answers them: "ttl_seconds: must be
// a positive integer".
func (e *InvalidInputError) Detail() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Unwrap returns Kind and Err, so that errors.Is matches both.
func (e *InvalidInputError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// RefusalError is a refusal that says more than its sentinel: Kind
// token.ErrInvalidState with Detail "cannot complete a token that is
// consumed", Kind operation.ErrUnknown with Detail `"checkout.submit"`. It
// matches Kind with errors.Is; the API answers Kind's code and adds Detail.
type RefusalError struct {
	Kind   error
	Detail string
}

// Refuse returns a *RefusalError of kind whose detail is format's.
func Refuse(kind error, format string, args ...any) error {
	return &RefusalError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Error returns Kind's text and the detail.
func (e *RefusalError) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap returns Kind.
func (e *RefusalError) Unwrap() error { return e.Kind }
