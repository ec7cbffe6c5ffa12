package token

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"

	"github.com/tokend/tokend/internal/infra/clock"
)

// IDPrefix starts every token id.
const IDPrefix = "tok_"

// OperationIDPrefix starts every downstream operation id of a lease.
const OperationIDPrefix = "op_"

// base32hex keeps byte order, so ids sort by creation time.
var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns a new public token id: a millisecond timestamp and 80 random
// bits, so ids are unguessable yet index and paginate in creation order.
// The timestamp is the process clock's (internal/infra/clock): it orders ids and
// decides nothing; expiry and leases are judged by the database clock.
func NewID() string { return newSortable(IDPrefix) }

// NewOperationID returns a new id for the downstream idempotency key of a lease.
func NewOperationID() string { return newSortable(OperationIDPrefix) }

func newSortable(prefix string) string {
	var b [16]byte
	ms := uint64(clock.Now().UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	if _, err := rand.Read(b[6:]); err != nil {
		panic("token: crypto/rand failed: " + err.Error())
	}
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// IDTime returns the time NewID stamped into a token id, to the millisecond,
// as the clock of the process that minted it read; ok is false when id is
// not a token id. It tells when and by how skewed a clock an id was made,
// never whether its token is still valid: expires_at says that.
func IDTime(id string) (t time.Time, ok bool) {
	if !ValidID(id) {
		return time.Time{}, false
	}
	b, err := idEncoding.DecodeString(strings.ToUpper(id[len(IDPrefix):]))
	if err != nil || len(b) != 16 {
		return time.Time{}, false
	}
	ms := uint64(binary.BigEndian.Uint16(b[0:2]))<<32 | uint64(binary.BigEndian.Uint32(b[2:6]))
	return time.UnixMilli(int64(ms)), true
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
