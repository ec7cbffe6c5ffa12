package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/tokend/tokend"
)

// SecretPrefix starts every token secret, so a leaked one is recognisable
// (secret scanners, logs) and a key is never mistaken for a token.
const SecretPrefix = "tks_"

// MinKeyLen is the shortest server key accepted.
const MinKeyLen = 32

const secretBytes = 32 // 256 bits

var (
	// ErrMalformedSecret means a presented secret cannot be one of ours.
	ErrMalformedSecret = errors.New("token: malformed secret")
	// ErrKeyRetired means a token's secret was derived under a server key
	// the keyring no longer holds: an operator retired it, after a leak
	// perhaps. The secret can be neither re-derived nor spent.
	ErrKeyRetired = errors.New("token: server key retired")
)

// Keyring holds the server keys secrets are derived under: the current one for
// new tokens and previous ones so tokens issued before a rotation can still be
// re-issued and spent. A key left out of the keyring is retired: tokens
// derived under it are refused (ErrKeyRetired). A database dump without the
// keyring yields no usable secret.
type Keyring struct {
	current string
	ids     []string // current first, then previous, as given
	keys    map[string][]byte
}

// NewKeyring builds a keyring whose current key is current. Every key must be
// at least MinKeyLen bytes of high-entropy text.
func NewKeyring(current string, previous ...string) (*Keyring, error) {
	k := &Keyring{keys: map[string][]byte{}}
	for i, key := range append([]string{current}, previous...) {
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("token: server key %d is %d bytes, want at least %d", i, len(key), MinKeyLen)
		}
		id := KeyID(key)
		if i == 0 {
			k.current = id
		}
		if _, dup := k.keys[id]; !dup {
			k.ids = append(k.ids, id)
		}
		k.keys[id] = []byte(key)
	}
	return k, nil
}

// KeyID names a server key without revealing it.
func KeyID(key string) string {
	sum := sha256.Sum256([]byte("tokend key id\x00" + key))
	return "k" + hex.EncodeToString(sum[:6])
}

// CurrentKeyID is the id of the key new tokens are derived under.
func (k *Keyring) CurrentKeyID() string { return k.current }

// KeyIDs returns the ids of the keyring's keys, the current one first, so
// an operator can tell which keys a process holds and which are retired.
func (k *Keyring) KeyIDs() []string { return slices.Clone(k.ids) }

// Check returns nil when keyID names a key of the keyring, and an error
// wrapping ErrKeyRetired when it does not.
func (k *Keyring) Check(keyID string) error {
	if _, ok := k.keys[keyID]; !ok {
		return tokend.Refuse(ErrKeyRetired, "%s", keyID)
	}
	return nil
}

// NewNonce returns the random per-token input of Derive.
func NewNonce() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic("token: crypto/rand failed: " + err.Error())
	}
	return b
}

// Derive returns the secret of token id of tenant: HMAC-SHA256 under the key
// named keyID over the tenant, the id and the stored random nonce. The same
// inputs always give the same secret, which is how an idempotent re-issue
// hands the secret back without it being stored.
func (k *Keyring) Derive(keyID, tenant, id string, nonce []byte) (Secret, error) {
	if err := k.Check(keyID); err != nil {
		return "", err
	}
	key := k.keys[keyID]
	m := hmac.New(sha256.New, key)
	for _, part := range [][]byte{[]byte("tokend secret v1"), []byte(tenant), []byte(id), nonce} {
		m.Write(binary.BigEndian.AppendUint32(nil, uint32(len(part))))
		m.Write(part)
	}
	return Secret(SecretPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))), nil
}

// errMalformed is ErrMalformedSecret naming the refused input.
var errMalformed = tokend.Invalid(ErrMalformedSecret, "token", "is not a well-formed token secret")

// Secret is a token's bearer value. Its String method hides it, so a Secret
// that reaches a log or an error message by accident gives nothing away.
type Secret string

// ParseSecret checks that s has the shape of a secret.
func ParseSecret(s string) (Secret, error) {
	body, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok || len(body) != base64.RawURLEncoding.EncodedLen(secretBytes) {
		return "", errMalformed
	}
	// Strict rejects non-zero padding bits, so each secret has one spelling;
	// the decoded length catches the CR and LF the decoder would skip.
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil || len(b) != secretBytes {
		return "", errMalformed
	}
	return Secret(s), nil
}

// Hash is what is stored and looked up in place of the secret. The secret has
// 256 bits of entropy, so a fast hash is as safe as a slow one here.
func (s Secret) Hash() []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

// Reveal returns the bearer value, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// String redacts the secret.
func (s Secret) String() string { return SecretPrefix + "…" }

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// LogValue redacts the secret in log/slog output, JSON handlers included.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the secret in encoders, so only Reveal puts it on the
// wire.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
