// Package jsonread is tokend's one reading of JSON. Every request body, every
// payload a digest covers and every payload a Go handler executes is read
// here, the same way, so that no two parts of tokend can disagree on what a
// document says:
//
//   - member names match case-sensitively ("Amount" is not "amount");
//   - a duplicate member name, at any depth, is refused (RFC 8259 leaves
//     its meaning to each parser, and parsers disagree);
//   - strings must be valid UTF-8 and escapes must not be lone surrogates
//     ("\ud800"), which readers would otherwise replace or keep as they like;
//   - a value must be exactly one JSON value, with nothing after it;
//   - decoding into a Go value refuses members the value has no field for.
//
// It is github.com/go-json-experiment/json (the encoding/json/v2 proposal)
// with its default, strict options. Payloads are also held to [CheckPayload]:
// the RFC 8785 digest reads numbers as IEEE-754 doubles, so a number a double
// cannot hold exactly would be bound by the digest as one value and executed
// by a handler as another.
package jsonread

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

// Error is a refusal of a JSON document: it is malformed, reads two ways, or
// does not fit the Go value it is decoded into.
type Error struct {
	// Pointer is the RFC 6901 JSON Pointer to the value at fault, "" for
	// the document itself.
	Pointer string
	// say words the refusal for the value at a pointer, so that a refusal
	// found inside a member can be reported from the document's root.
	say func(ptr string) string
}

// Error says what is wrong, for people, naming the member at fault.
func (e *Error) Error() string { return e.say(e.Pointer) }

func refuse(ptr string, say func(ptr string) string) *Error {
	return &Error{Pointer: ptr, say: say}
}

// Unmarshal decodes b, exactly one JSON value, into v, which must be a
// non-nil pointer. A refusal is an *Error.
func Unmarshal(b []byte, v any) error {
	reads.Add(1)
	return translate(json.Unmarshal(b, v, json.RejectUnknownMembers(true)))
}

// Check reports, as an *Error, why b is not exactly one JSON value that
// every reader sees the same; nil if it is.
func Check(b []byte) error {
	_, err := walk(b, false, nil)
	return err
}

// CheckPayload is Check for a payload a digest binds: it also refuses, as an
// *Error, any number the RFC 8785 form would change. RFC 8785 reads a number
// as an IEEE-754 double and writes the shortest decimal that reads back as
// that double; a number literal is accepted when the decimal value it spells
// equals the decimal value of what RFC 8785 writes for it. Two accepted
// payloads with one canonical form therefore spell the same numbers.
// 1, 1.0, 1e0, 0.1 and 12.50 pass, while
// 9007199254740993 (2^53+1, which a double rounds to 2^53),
// 0.10000000000000000001, 1e400 and 1e-400 are refused. -0 spells the value
// zero, which RFC 8785 writes "0", and is accepted as zero.
func CheckPayload(b []byte) error {
	_, err := walk(b, true, nil)
	return err
}

// CheckPayloadRead is CheckPayload for b that this package's Unmarshal has
// just read as one JSON value (the argument of a json.Unmarshaler's
// UnmarshalJSON during Unmarshal): the decoder refused malformed JSON,
// duplicate names, invalid UTF-8 and lone surrogates already, so only the
// numbers are left to check, and they are found without parsing b again.
// A refusal is CheckPayload's own, word for word. On b that no such decoder
// read, it is not a check: use CheckPayload.
func CheckPayloadRead(b []byte) error {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			// A string: a name or a value, skipped to its closing quote.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++ // the escaped byte, which may be a quote
				}
			}
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(b) && numberByte(b[j]) {
				j++
			}
			if inexact(string(b[i:j])) != "" {
				// CheckPayload finds it too, and names where it is.
				return CheckPayload(b)
			}
			i = j - 1
		}
	}
	return nil
}

// numberByte reports whether c may continue a JSON number literal.
func numberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// CheckPayloadFor is CheckPayload that also reports whether b has a member
// at any of paths, each a list of member names from the root ("meta",
// "trace_id" for meta.trace_id), so that a digest leaving those members out
// need not read b again to find there are none. It may report a member
// where an array index spells the name (an index 0 for a member "0"): a
// reader then looks for itself; it never misses one.
func CheckPayloadFor(b []byte, paths [][]string) (found bool, err error) {
	var ptrs []string
	if len(paths) > 0 {
		ptrs = make([]string, len(paths))
		for i, p := range paths {
			var sb strings.Builder
			for _, name := range p {
				sb.WriteByte('/')
				sb.WriteString(pointerEscaper.Replace(name))
			}
			ptrs[i] = sb.String()
		}
	}
	return walk(b, true, ptrs)
}

// pointerEscaper writes a member name as an RFC 6901 reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// reads counts the documents read by walk and Unmarshal (Reads).
var reads atomic.Int64

// Reads returns how many JSON documents this process has read through this
// package (Unmarshal, Check, CheckPayload, CheckPayloadFor), for tests that
// count the readings of a request's payload.
func Reads() int64 { return reads.Load() }

// walker is a decoder reused across walks: a new one is several allocations
// and a buffer, more than a small payload's reading costs.
type walker struct {
	src bytes.Buffer
	dec jsontext.Decoder
}

var walkers = sync.Pool{New: func() any { return new(walker) }}

// walk reads b token by token. The decoder's defaults refuse duplicate
// names, invalid UTF-8, lone surrogates and anything after the value. With
// ptrs, it reports whether a member name's pointer is one of them.
func walk(b []byte, exact bool, ptrs []string) (found bool, err error) {
	reads.Add(1)
	w := walkers.Get().(*walker)
	defer func() {
		// Drop b: the buffer is read in place, and must not be kept.
		w.src = bytes.Buffer{}
		w.dec.Reset(&w.src)
		walkers.Put(w)
	}()
	// A bytes.Buffer is read in place, without copying b. Nothing writes to it.
	w.src = *bytes.NewBuffer(b)
	dec := &w.dec
	dec.Reset(&w.src)
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return false, translate(err)
		}
		switch tok.Kind() {
		case '0':
			if exact {
				if err := exactNumber(tok.String(), dec); err != nil {
					return false, err
				}
			}
		case '"':
			if len(ptrs) > 0 && !found {
				// A string read right after an object's opening or one of
				// its values is a member name.
				if k, n := dec.StackIndex(dec.StackDepth()); k == '{' && n%2 == 1 {
					found = slices.Contains(ptrs, string(dec.StackPointer()))
				}
			}
		}
		if dec.StackDepth() == 0 { // the value is complete
			break
		}
	}
	// The decoder reads a stream of values; a document is one.
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return false, refuse("", func(string) string { return "unexpected data after the JSON value" })
	}
	return found, nil
}

// exactNumber refuses the number literal lit, the last token dec read, if it
// does not survive a round trip through an IEEE-754 double.
func exactNumber(lit string, dec *jsontext.Decoder) *Error {
	reason := inexact(lit)
	if reason == "" {
		return nil
	}
	ptr := string(dec.StackPointer())
	if len(lit) > 40 {
		lit = lit[:37] + "..."
	}
	return refuse(ptr, func(ptr string) string {
		return fmt.Sprintf("the number %s%s %s", lit, in(ptr), reason)
	})
}

// inexact returns why the JSON number lit does not survive a round trip
// through an IEEE-754 double, or "" when it does.
func inexact(lit string) string {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return "is out of the range of an IEEE-754 double"
	}
	canon, err := jcs.NumberToJSON(f)
	if err != nil || !sameDecimal(lit, canon) {
		return "is not exactly an IEEE-754 double, so its digest would bind another number " +
			"(integers beyond ±2^53 are not); send it as a string"
	}
	return ""
}

// sameDecimal reports whether the JSON numbers a and b spell the same
// decimal value. Neither is built: each is reduced to a sign, its
// significant digits and a power of ten.
func sameDecimal(a, b string) bool {
	negA, digitsA, expA, okA := decimal(a)
	negB, digitsB, expB, okB := decimal(b)
	switch {
	case !okA || !okB:
		return false
	case digitsA == "" || digitsB == "": // zero has no sign
		return digitsA == digitsB
	}
	return negA == negB && digitsA == digitsB && expA == expB
}

// decimal reduces the JSON number s to ±digits × 10^exp, digits without
// leading or trailing zeros ("" for zero). ok is false for an exponent too
// large to compute with, which no finite non-zero double has.
func decimal(s string) (neg bool, digits string, exp int64, ok bool) {
	s, neg = strings.CutPrefix(s, "-")
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits = strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return neg, "", 0, true
	}
	if hasExp {
		e, err := strconv.ParseInt(strings.TrimPrefix(expPart, "+"), 10, 64)
		if err != nil || e > 1<<40 || e < -(1<<40) {
			return neg, digits, 0, false
		}
		exp = e
	}
	exp -= int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	return neg, trimmed, exp, true
}

// translate turns the decoder's errors into *Error. Any other error is
// returned as it is.
func translate(err error) error {
	// Returned before the targets of errors.As are declared: they escape, so
	// each would cost an allocation on every successful read.
	if err == nil {
		return nil
	}
	var (
		own *Error
		sem *json.SemanticError
		syn *jsontext.SyntacticError
	)
	switch {
	case errors.As(err, &own):
		if errors.As(err, &sem) {
			// A type's UnmarshalJSON refused its value: report it from the root.
			return refuse(string(sem.JSONPointer)+own.Pointer, own.say)
		}
		return own
	case errors.As(err, &syn):
		return syntaxError(syn)
	case errors.As(err, &sem):
		return semanticError(sem)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return refuse("", func(string) string { return "the JSON ends early" })
	}
	return err
}

func syntaxError(e *jsontext.SyntacticError) *Error {
	ptr := string(e.JSONPointer)
	msg := "invalid syntax"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	switch {
	case errors.Is(e.Err, jsontext.ErrDuplicateName):
		return refuse(ptr, func(ptr string) string {
			p := jsontext.Pointer(ptr)
			return fmt.Sprintf("duplicate member %q%s: a name may appear only once in an object", p.LastToken(), in(string(p.Parent())))
		})
	case errors.Is(e.Err, io.ErrUnexpectedEOF):
		return refuse(ptr, func(string) string { return "the JSON ends early" })
	case strings.HasSuffix(msg, "after top-level value"):
		return refuse("", func(string) string { return "unexpected data after the JSON value" })
	}
	offset := e.ByteOffset
	return refuse(ptr, func(ptr string) string {
		return fmt.Sprintf("malformed JSON at byte %d%s: %s", offset, in(ptr), msg)
	})
}

func semanticError(e *json.SemanticError) *Error {
	ptr := string(e.JSONPointer)
	switch {
	case errors.Is(e.Err, json.ErrUnknownName):
		return refuse(ptr, func(ptr string) string {
			p := jsontext.Pointer(ptr)
			return fmt.Sprintf("unknown field %q%s", p.LastToken(), in(string(p.Parent())))
		})
	case e.GoType == nil:
		detail := e.Error()
		return refuse(ptr, func(ptr string) string { return fmt.Sprintf("invalid value%s: %s", in(ptr), detail) })
	}
	want, got := goKind(e.GoType), jsonKind(e.JSONKind)
	if e.JSONKind == '0' && strings.Contains(want, "integer") {
		got = "a fraction or a number out of range"
	}
	return refuse(ptr, func(ptr string) string {
		if ptr == "" {
			return fmt.Sprintf("the JSON must be %s, not %s", want, got)
		}
		return fmt.Sprintf("field %q must be %s, not %s", field(ptr), want, got)
	})
}

// field names the member at ptr as a dotted path: "payload.amount".
func field(ptr string) string {
	return strings.Join(slices.Collect(jsontext.Pointer(ptr).Tokens()), ".")
}

// in is " in" the member at ptr, or "" at the root.
func in(ptr string) string {
	if ptr == "" {
		return ""
	}
	return fmt.Sprintf(" in %q", field(ptr))
}

// goKind says what a Go value of type t holds, in JSON's words.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return goKind(t.Elem())
	}
	return "an object"
}

// jsonKind names a JSON kind as the decoder reports it.
func jsonKind(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "invalid"
}
