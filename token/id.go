package token

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

// IDPrefix starts every token id.
const IDPrefix = "tok_"

// OperationIDPrefix starts every downstream operation id of a lease.
const OperationIDPrefix = "op_"

// base32hex keeps byte order, so ids sort by creation time.
var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns a new public token id: a millisecond timestamp and 80 random
// bits, so ids are unguessable yet index and paginate in creation order.
func NewID() string { return newSortable(IDPrefix) }

// NewOperationID returns a new id for the downstream idempotency key of a lease.
func NewOperationID() string { return newSortable(OperationIDPrefix) }

func newSortable(prefix string) string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	if _, err := rand.Read(b[6:]); err != nil {
		panic("token: crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// ValidID reports whether s has the shape of a token id. It lets callers turn
// away garbage before it reaches the database.
func ValidID(s string) bool {
	if !strings.HasPrefix(s, IDPrefix) || len(s) != len(IDPrefix)+26 {
		return false
	}
	for _, c := range s[len(IDPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return false
		}
	}
	return true
}
