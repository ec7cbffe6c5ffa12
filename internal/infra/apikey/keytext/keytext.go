// Package keytext is the text of an API key: its prefixes, how a secret and
// an id are made, and the shape test a presented key passes before any
// lookup. It holds no storage (package apikey does), so the shape test can
// be fuzzed without building a database driver.
package keytext

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"strings"
)

// Prefixes of a key's plaintext and of its public id. The plaintext prefix
// lets secret scanners and people recognise a leaked key.
const (
	SecretPrefix = "tkd_"
	IDPrefix     = "key_"
)

// SecretBytes is the randomness of a secret: 256 bits.
const SecretBytes = 32

// NewSecret returns a fresh secret: SecretPrefix, then SecretBytes random
// bytes in unpadded base64url.
func NewSecret() string {
	var raw [SecretBytes]byte
	_, _ = rand.Read(raw[:]) // never fails, see crypto/rand.Read
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
}

// WellFormed reports whether s is spelled as NewSecret spells secrets, in
// its one canonical spelling: strict base64url, no padding, no CR or LF.
func WellFormed(s string) bool {
	body, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok || len(body) != base64.RawURLEncoding.EncodedLen(SecretBytes) {
		return false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	return err == nil && len(b) == SecretBytes
}

var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns a fresh public key id: IDPrefix, then 128 random bits in
// lower-case base32hex.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return IDPrefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}
