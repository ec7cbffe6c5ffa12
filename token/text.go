package token

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/tokend/tokend"
)

// ErrInvalidText: a string is not text Postgres can store (see ValidText).
// The packages that store request strings wrap it in their own invalid-request
// errors, so an embedder gets a typed refusal instead of a database error.
var ErrInvalidText = errors.New("token: not valid UTF-8 text without NUL")

// ValidText reports whether s is text Postgres can store in a text column:
// valid UTF-8 without NUL bytes. Postgres refuses anything else with SQLSTATE
// 22021 (invalid byte sequence), or 22P05 for a \u0000 in jsonb.
func ValidText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// CheckText returns an error wrapping ErrInvalidText that names the first of
// fields (name, value, name, value, ...) that is not ValidText, or nil.
func CheckText(fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if !ValidText(fields[i+1]) {
			return textError(fields[i], fields[i+1])
		}
	}
	return nil
}

func textError(name, value string) error {
	why := "is not valid UTF-8"
	if utf8.ValidString(value) {
		why = "holds a NUL character"
	}
	return tokend.Invalid(ErrInvalidText, name, why+" (text must be valid UTF-8 without NUL)")
}
