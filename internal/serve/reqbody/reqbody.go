// Package reqbody is the JSON bodies tokend's API takes, and the one way
// they are read: member names match case-sensitively, and duplicate members
// at any depth, invalid UTF-8, lone surrogates, unknown fields, trailing data,
// values of the wrong type and strings Postgres cannot store (NUL) are
// refused with an *Error that names what was wrong (internal/infra/jsonread).
//
// It imports neither HTTP nor the database: internal/serve/httpapi reads a body
// and answers an *Error as 400 invalid_request, and fuzzing Decode builds
// in seconds.
package reqbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tokend/tokend/internal/infra/jsonread"
)

// Error is a body Decode refuses; Detail says why, for the caller.
type Error struct{ Detail string }

func (e *Error) Error() string { return e.Detail }

// Decode reads body, one JSON object, into dst, a pointer to one of this
// package's types or another struct. A body it refuses gives an *Error; any
// other error is a bug, such as a dst that is not a pointer.
func Decode(body []byte, dst any) error {
	if err := checkText(body); err != nil {
		return err
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return &Error{"the request body must be a JSON object"}
	}
	if err := jsonread.Unmarshal(body, dst); err != nil {
		var refused *jsonread.Error
		if errors.As(err, &refused) {
			return &Error{refused.Error()}
		}
		return err
	}
	return nil
}

// checkText refuses a body that is not valid UTF-8 (RFC 8259 wants UTF-8;
// encoding/json would quietly turn bad bytes into U+FFFD) or that has a
// string, key or value, holding an escaped NUL (\u0000), which no text
// column or jsonb value can store. It needs no parse: a backslash outside a
// string is a syntax error that decoding reports anyway.
func checkText(body []byte) error {
	if !utf8.Valid(body) {
		return &Error{fmt.Sprintf("the request body is not valid UTF-8 (at byte %d); text must be valid UTF-8 without NUL", invalidUTF8At(body))}
	}
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case 0:
			return &Error{fmt.Sprintf("the request body holds a NUL byte at byte %d; text must be valid UTF-8 without NUL", i)}
		case '\\':
			if i+5 < len(body) && body[i+1] == 'u' && string(body[i+2:i+6]) == "0000" {
				return &Error{fmt.Sprintf("the request body holds a NUL character (\\u0000) at byte %d; text must be valid UTF-8 without NUL", i)}
			}
			i++ // the escaped character, which may be a backslash
		}
	}
	return nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// Payload is a request's business payload, kept as sent. Decoding refuses a
// payload jsonread.CheckPayload refuses, bound by a digest or not, so that a
// number the digest would read as another is refused at issue and at spend.
type Payload []byte

// UnmarshalJSON keeps b once it passes jsonread.CheckPayload. Decode's
// reading (jsonread.Unmarshal) has read b as one strict JSON value before
// calling it, so only b's numbers are checked (jsonread.CheckPayloadRead).
func (p *Payload) UnmarshalJSON(b []byte) error {
	if err := jsonread.CheckPayloadRead(b); err != nil {
		return err
	}
	*p = append((*p)[:0], b...)
	return nil
}

// Raw returns an optional raw JSON member, nil when it is absent or null: a
// null payload or result binds nothing, like an absent one.
func Raw(m []byte) []byte {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}

// Issue is the body of POST /v1/tokens.
type Issue struct {
	Operation  string  `json:"operation"`
	Subject    string  `json:"subject"`
	TTLSeconds int     `json:"ttl_seconds"`
	Payload    Payload `json:"payload"`
}

// Consume is the body of POST /v1/tokens/consume.
type Consume struct {
	Token     string  `json:"token"`
	Operation string  `json:"operation"`
	Subject   string  `json:"subject"`
	Payload   Payload `json:"payload"`
}

// Complete is the body of a lease holder's POST /v1/tokens/{id}/complete.
type Complete struct {
	Generation *int64          `json:"generation"`
	Status     int             `json:"status"`
	Result     json.RawMessage `json:"result"`
}

// Fail is the body of POST /v1/tokens/{id}/fail.
type Fail struct {
	Generation *int64          `json:"generation"`
	Status     int             `json:"status"`
	Error      json.RawMessage `json:"error"`
}

// Unknown is the body of POST /v1/tokens/{id}/unknown.
type Unknown struct {
	Generation *int64 `json:"generation"`
}

// Revoke is the body of POST /v1/admin/tokens/{id}/revoke.
type Revoke struct {
	Reason string `json:"reason"`
}

// Reconcile is the body of POST /v1/admin/tokens/{id}/reconcile; Outcome
// is one of admin.Outcome's values.
type Reconcile struct {
	Outcome string          `json:"outcome"`
	Status  int             `json:"status"`
	Result  json.RawMessage `json:"result"`
}
