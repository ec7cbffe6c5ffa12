package token

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/gowebpki/jcs"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/internal/infra/jsonread"
)

// ErrInvalidPayload means a payload is not one JSON value that every reader
// reads the same way: it is malformed, has a duplicate member name at any
// depth, invalid UTF-8 or a lone surrogate, or a number an IEEE-754 double
// does not hold exactly (see internal/infra/jsonread.CheckPayload).
var ErrInvalidPayload = errors.New("token: invalid payload")

// Digest returns the SHA-256 of the RFC 8785 canonical form of payload after
// removing the ignored fields. A field is a top-level member name or a dotted
// path into nested objects ("meta.trace_id"); a member whose name contains a
// dot cannot be ignored. Equal JSON values give equal
// digests whatever their formatting or member order.
func Digest(payload []byte, ignored []string) ([]byte, error) {
	canon, err := Canonical(payload, ignored)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canon)
	return sum[:], nil
}

// Canonical returns the RFC 8785 form of payload without the ignored fields.
// It refuses, wrapping ErrInvalidPayload, a payload that could be read two
// ways, so that two payloads with one canonical form spell the same names,
// strings and decimal numbers: a handler reading either reads the same.
func Canonical(payload []byte, ignored []string) ([]byte, error) {
	var paths [][]string
	if len(ignored) > 0 {
		paths = make([][]string, len(ignored))
		for i, f := range ignored {
			paths[i] = strings.Split(f, ".")
		}
	}
	// One reading checks the payload and finds whether it has an ignored
	// member at all: most payloads have none, and then the canonical form
	// is the digest's without a second reading to remove nothing.
	found, err := jsonread.CheckPayloadFor(payload, paths)
	if err != nil {
		return nil, tokend.InvalidWith(ErrInvalidPayload, "", err)
	}
	canon, err := jcs.Transform(payload)
	if err != nil {
		return nil, tokend.Invalid(ErrInvalidPayload, "", err.Error())
	}
	if !found || len(canon) == 0 || canon[0] != '{' {
		return canon, nil
	}
	// Every number in canon is exactly a double (CheckPayload), so reading
	// numbers as float64 and writing them again loses nothing.
	var doc map[string]any
	if err := jsonread.Unmarshal(canon, &doc); err != nil {
		return nil, tokend.InvalidWith(ErrInvalidPayload, "", err)
	}
	removed := false
	for _, p := range paths {
		removed = removePath(doc, p) || removed
	}
	if !removed {
		return canon, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, tokend.Invalid(ErrInvalidPayload, "", err.Error())
	}
	out, err := jcs.Transform(b)
	if err != nil {
		return nil, tokend.Invalid(ErrInvalidPayload, "", err.Error())
	}
	return out, nil
}

func removePath(doc map[string]any, path []string) bool {
	if len(path) == 1 {
		_, ok := doc[path[0]]
		delete(doc, path[0])
		return ok
	}
	child, ok := doc[path[0]].(map[string]any)
	return ok && removePath(child, path[1:])
}

// Fingerprint identifies what an issue request asks for, so a retry of the
// same intent can be told apart from a reuse of its key for something else.
func Fingerprint(operation, subject string, digest []byte, ttlSeconds int, apiVersion string) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte("tokend fingerprint v1"), []byte(operation), []byte(subject), digest, binary.BigEndian.AppendUint64(nil, uint64(ttlSeconds)), []byte(apiVersion)} {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		h.Write(part)
	}
	return h.Sum(nil)
}
