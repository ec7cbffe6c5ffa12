package consume

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/internal/infra/jsonread"
	"github.com/tokend/tokend/operation"
)

// Func is RegisterFunc's handler alone, for Register or RegisterBuiltin: it
// returns the Handler that reads each payload into a T and calls fn
// with it. It reads the payload with DecodePayload, tokend's one strict
// reading, the one the payload digest has; a payload it refuses, or one
// whose T's Validate method (if *T or T has one) refuses, abandons the spend
// with a *PayloadError and is refused at issue too: the handler is a
// Validator.
//
// A T whose pointer has an UnmarshalJSON method reads the payload itself,
// after CheckPayload; an error it returns that is not a *PayloadError is
// answered as one for the payload as a whole.
func Func[T any](fn func(ctx context.Context, tx pgx.Tx, c Call, in T) (Outcome, error)) Handler {
	return funcHandler[T](fn)
}

// RegisterFunc is the way to add an operation: it makes fn the handler of
// p.Name, reading each payload into a T (Func), and declares p for every
// tenant, as RegisterBuiltin does: one call, so an operation registered this
// way is never declared without the Go code that runs it, and its payload is
// checked at issue as at spend. fn runs in the spend's transaction, tx: what
// it writes there commits exactly when the token is consumed.
func RegisterFunc[T any](r *Registry, p operation.Policy, fn func(ctx context.Context, tx pgx.Tx, c Call, in T) (Outcome, error)) {
	r.RegisterBuiltin(p, Func(fn))
}

type funcHandler[T any] func(ctx context.Context, tx pgx.Tx, c Call, in T) (Outcome, error)

// Execute decodes the payload and calls h.
func (h funcHandler[T]) Execute(ctx context.Context, tx pgx.Tx, c Call) (Outcome, error) {
	return h.execute(ctx, tx, c, false)
}

// execute is Execute; checked says the payload passed CheckPayload already
// (the spend's digest reads it the same way, and more strictly), so
// decoding it need not check it again.
func (h funcHandler[T]) execute(ctx context.Context, tx pgx.Tx, c Call, checked bool) (Outcome, error) {
	in, err := decodeInput[T](c.Payload, checked)
	if err != nil {
		return Outcome{}, err
	}
	return h(ctx, tx, c, in)
}

// Validate refuses what Execute would refuse before it ran h.
func (h funcHandler[T]) Validate(payload []byte) error {
	_, err := decodeInput[T](payload, false)
	return err
}

// validateChecked is Validate for a payload CheckPayload accepted.
func (h funcHandler[T]) validateChecked(payload []byte) error {
	_, err := decodeInput[T](payload, true)
	return err
}

// checkedHandler is a Handler that can skip the JSON check of a payload the
// spend or the issue has already checked: the payload digest's reading
// (jsonread.CheckPayload) refuses all that CheckPayload refuses.
type checkedHandler interface {
	execute(ctx context.Context, tx pgx.Tx, c Call, checked bool) (Outcome, error)
	validateChecked(payload []byte) error
}

func decodeInput[T any](payload []byte, checked bool) (T, error) {
	var in T
	if err := decodePayload(payload, &in, checked); err != nil {
		return in, err
	}
	var v any = &in
	if _, ok := v.(interface{ Validate() error }); !ok {
		v = in
	}
	if v, ok := v.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return in, asPayloadError(err)
		}
	}
	return in, nil
}

// CheckPayload reports, as a *PayloadError, why payload is not exactly one
// JSON value that every reader reads the same way: malformed, a member name
// given twice at any depth, invalid UTF-8 or a lone surrogate, data after
// the value. It is the first step of DecodePayload, for a handler that reads
// its payload some other way.
func CheckPayload(payload []byte) error {
	if err := jsonread.Check(payload); err != nil {
		return asPayloadError(err)
	}
	return nil
}

// DecodePayload reads payload into v, a non-nil pointer, the way tokend
// reads every request body and payload: CheckPayload, then member names
// matched case-sensitively, and a member v has no field for refused. A
// refusal is a *PayloadError naming the member at fault.
//
// A v with an UnmarshalJSON method reads the payload itself, after
// CheckPayload; its error is returned as a *PayloadError (as is, if it is one).
func DecodePayload(payload []byte, v any) error {
	return decodePayload(payload, v, false)
}

// decodePayload is DecodePayload, without CheckPayload when checked.
func decodePayload(payload []byte, v any, checked bool) error {
	if !checked {
		if err := CheckPayload(payload); err != nil {
			return err
		}
	}
	if u, ok := v.(json.Unmarshaler); ok {
		if err := u.UnmarshalJSON(payload); err != nil {
			return asPayloadError(err)
		}
		return nil
	}
	if err := jsonread.Unmarshal(payload, v); err != nil {
		return asPayloadError(err)
	}
	return nil
}

// asPayloadError returns err as a *PayloadError: as is if it is one, with
// the member a reading refusal points at, or as a rule for the whole payload.
func asPayloadError(err error) error {
	var (
		pe      *PayloadError
		invalid *tokend.InvalidInputError
		refused *jsonread.Error
	)
	switch {
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &invalid):
		return &PayloadError{Field: invalid.Field, Rule: invalid.Reason}
	case errors.As(err, &refused):
		// The refusal's own words name the member from the payload's root,
		// so the field stays empty and the words are the rule.
		return &PayloadError{Rule: refused.Error()}
	}
	return &PayloadError{Rule: strings.TrimSpace(err.Error())}
}
