package token

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var (
	testKey    = strings.Repeat("k", MinKeyLen)
	testOldKey = strings.Repeat("o", MinKeyLen+8)
)

func mustKeyring(t testing.TB, current string, previous ...string) *Keyring {
	t.Helper()
	k, err := NewKeyring(current, previous...)
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	return k
}

func mustDerive(t testing.TB, k *Keyring, keyID, tenant, id string, nonce []byte) Secret {
	t.Helper()
	s, err := k.Derive(keyID, tenant, id, nonce)
	if err != nil {
		t.Fatalf("Derive(%q, %q, %q, %x): %v", keyID, tenant, id, nonce, err)
	}
	return s
}

func TestNewKeyringKeyLength(t *testing.T) {
	short := strings.Repeat("s", MinKeyLen-1)
	tests := []struct {
		name     string
		current  string
		previous []string
		ok       bool
	}{
		{"exactly MinKeyLen", testKey, nil, true},
		{"with previous", testKey, []string{testOldKey}, true},
		{"empty current", "", nil, false},
		{"short current", short, nil, false},
		{"short previous", testKey, []string{testOldKey, short}, false},
		{"empty previous", testKey, []string{""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := NewKeyring(tt.current, tt.previous...)
			if tt.ok {
				if err != nil || k == nil {
					t.Fatalf("NewKeyring = %v, %v; want a keyring", k, err)
				}
				return
			}
			if err == nil {
				t.Fatal("NewKeyring accepted a short key")
			}
			// The error is logged at startup; it must not echo a key.
			if tt.current != "" && strings.Contains(err.Error(), tt.current) {
				t.Errorf("error %q contains the key", err)
			}
		})
	}
}

func TestKeyID(t *testing.T) {
	id := KeyID(testKey)
	if id != KeyID(testKey) {
		t.Error("KeyID is not deterministic")
	}
	if id == KeyID(testOldKey) {
		t.Error("KeyID is the same for two keys")
	}
	// Key ids are logged and stored next to every token; no run of the key
	// may show through. A hex key is used because a naive id (a prefix of
	// the key, or of its hex) would be made of the same characters.
	hexKey := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	hexID := KeyID(hexKey)
	for i := 0; i+6 <= len(hexKey); i++ {
		if strings.Contains(hexID, hexKey[i:i+6]) {
			t.Errorf("KeyID(key) = %q contains %q from the key", hexID, hexKey[i:i+6])
		}
	}
	k := mustKeyring(t, testKey, testOldKey)
	if got := k.CurrentKeyID(); got != id {
		t.Errorf("CurrentKeyID() = %q, want KeyID(current) = %q", got, id)
	}
}

func TestNewNonce(t *testing.T) {
	a, b := NewNonce(), NewNonce()
	if len(a) != 16 {
		t.Errorf("len(NewNonce()) = %d, want 16", len(a))
	}
	if bytes.Equal(a, b) {
		t.Errorf("NewNonce() returned %x twice", a)
	}
}

func TestDerive(t *testing.T) {
	k := mustKeyring(t, testKey)
	other := mustKeyring(t, testOldKey)
	nonce := []byte("0123456789abcdef")
	base := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", nonce)

	if again := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", bytes.Clone(nonce)); again != base {
		t.Error("Derive is not deterministic: a re-issue would hand back a different secret")
	}
	if !strings.HasPrefix(string(base), SecretPrefix) {
		t.Errorf("derived secret lacks prefix %q", SecretPrefix)
	}
	if _, err := ParseSecret(base.Reveal()); err != nil {
		t.Errorf("ParseSecret(derived) = %v", err)
	}

	variants := map[string]Secret{
		"tenant": mustDerive(t, k, k.CurrentKeyID(), "acme2", "tok_1", nonce),
		"id":     mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_2", nonce),
		"nonce":  mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", []byte("0123456789abcdeF")),
		"key":    mustDerive(t, other, other.CurrentKeyID(), "acme", "tok_1", nonce),
		// Length-prefixing the inputs keeps moving bytes between fields
		// from giving the same secret.
		"tenant/id boundary": mustDerive(t, k, k.CurrentKeyID(), "acmet", "ok_1", nonce),
		"id/nonce boundary":  mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_10", nonce[1:]),
	}
	for name, s := range variants {
		if s == base {
			t.Errorf("secret does not change when the %s changes", name)
		}
		if _, err := ParseSecret(s.Reveal()); err != nil {
			t.Errorf("%s variant: ParseSecret(derived) = %v", name, err)
		}
	}
}

// After a rotation, tokens issued under the old key must still re-issue with
// their original secret, while new tokens use the new key.
func TestDeriveAfterRotation(t *testing.T) {
	nonce := NewNonce()
	before := mustKeyring(t, testOldKey)
	old := mustDerive(t, before, before.CurrentKeyID(), "acme", "tok_1", nonce)

	after := mustKeyring(t, testKey, testOldKey)
	if after.CurrentKeyID() == before.CurrentKeyID() {
		t.Fatal("rotation did not change the current key")
	}
	if got := mustDerive(t, after, KeyID(testOldKey), "acme", "tok_1", nonce); got != old {
		t.Error("secret derived under the previous key changed after rotation")
	}
	if got := mustDerive(t, after, after.CurrentKeyID(), "acme", "tok_1", nonce); got == old {
		t.Error("the new current key derives the same secret as the old key")
	}
}

func TestKeyIDs(t *testing.T) {
	k := mustKeyring(t, testKey, testOldKey, testKey)
	got := k.KeyIDs()
	if len(got) != 2 || got[0] != KeyID(testKey) || got[1] != KeyID(testOldKey) {
		t.Fatalf("KeyIDs = %v, want current then previous, once each", got)
	}
	got[0] = "changed"
	if k.KeyIDs()[0] != KeyID(testKey) {
		t.Fatal("KeyIDs exposes the keyring's own slice")
	}
}

func TestDeriveUnknownKey(t *testing.T) {
	k := mustKeyring(t, testKey)
	for _, keyID := range []string{KeyID(testOldKey), "", "knope"} {
		if s, err := k.Derive(keyID, "acme", "tok_1", NewNonce()); !errors.Is(err, ErrKeyRetired) || s != "" {
			t.Errorf("Derive(%q) = %q, %v; want \"\", ErrKeyRetired", keyID, s.Reveal(), err)
		}
	}
}

// TestCheckRetiredKey: a key stays checkable while it is current or
// previous, and is refused once the keyring no longer holds it.
func TestCheckRetiredKey(t *testing.T) {
	old, cur := KeyID(testOldKey), KeyID(testKey)
	tests := []struct {
		name    string
		keyring *Keyring
		keyID   string
		retired bool
	}{
		{"current", mustKeyring(t, testOldKey), old, false},
		{"rotated, still previous", mustKeyring(t, testKey, testOldKey), old, false},
		{"rotated, new current", mustKeyring(t, testKey, testOldKey), cur, false},
		{"retired", mustKeyring(t, testKey), old, true},
		{"never held", mustKeyring(t, testKey), "knope", true},
		{"empty id", mustKeyring(t, testKey), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.keyring.Check(tt.keyID)
			if got := errors.Is(err, ErrKeyRetired); got != tt.retired || (err != nil) != tt.retired {
				t.Fatalf("Check(%q) = %v; want retired %v", tt.keyID, err, tt.retired)
			}
			if err != nil && strings.Contains(err.Error(), testOldKey) {
				t.Fatal("the error quotes a key")
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	k := mustKeyring(t, testKey)
	good := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", NewNonce()).Reveal()
	body := strings.TrimPrefix(good, SecretPrefix)
	if len(body) != 43 {
		t.Fatalf("secret body is %d characters, want 43 (256 bits, unpadded base64)", len(body))
	}

	got, err := ParseSecret(good)
	if err != nil || got.Reveal() != good {
		t.Fatalf("ParseSecret(%q) = %q, %v; want it back", good, got.Reveal(), err)
	}

	tests := []struct {
		name, in string
	}{
		{"empty", ""},
		{"prefix only", SecretPrefix},
		{"no prefix", body},
		{"wrong prefix", "tkz_" + body},
		{"upper-case prefix", "TKS_" + body},
		{"token id prefix", IDPrefix + body},
		{"leading space", " " + good},
		{"trailing space", good[:len(good)-1] + " "},
		{"one short", good[:len(good)-1]},
		{"one long", good + "A"},
		{"padded", good + "="},
		{"standard base64 '+'", SecretPrefix + "+" + body[1:]},
		{"standard base64 '/'", SecretPrefix + "/" + body[1:]},
		{"dot", SecretPrefix + "." + body[1:]},
		{"non-ASCII", SecretPrefix + "é" + body[2:]},
		{"NUL", SecretPrefix + "\x00" + body[1:]},
		{"trailing LF", good[:len(good)-1] + "\n"},
		{"embedded CR", good[:10] + "\r" + good[11:]},
		{"non-zero padding bits", nonCanonical(good)},
	}
	for _, tt := range tests {
		if got, err := ParseSecret(tt.in); !errors.Is(err, ErrMalformedSecret) || got != "" {
			t.Errorf("%s: ParseSecret(%q) = %q, %v; want \"\", ErrMalformedSecret", tt.name, tt.in, got.Reveal(), err)
		}
	}
}

func TestSecretHash(t *testing.T) {
	k := mustKeyring(t, testKey)
	a := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", NewNonce())
	b := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_2", NewNonce())

	if len(a.Hash()) != 32 {
		t.Errorf("len(Hash()) = %d, want 32", len(a.Hash()))
	}
	// The stored hash is looked up on every spend, so it must be stable.
	if !bytes.Equal(a.Hash(), a.Hash()) {
		t.Error("Hash is not deterministic")
	}
	if bytes.Equal(a.Hash(), b.Hash()) {
		t.Error("two secrets have the same Hash")
	}
}

// Stored hashes and re-derived secrets outlive a release: if either function
// changed, every token already issued would stop matching its stored hash or
// re-issue with a secret different from the one the client holds. These
// vectors pin both; they were checked against an independent HMAC-SHA256
// computation (Python hmac/hashlib).
func TestSecretGolden(t *testing.T) {
	k := mustKeyring(t, "0123456789abcdef0123456789abcdef")
	s := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_00000000000000000000000000", []byte("nonce-0123456789"))
	if got, want := s.Reveal(), "tks_ScZxPuqa30BuQaYmxKlUTksB3SZCWs3_nRXBUQ_IGiE"; got != want {
		t.Errorf("Derive = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%x", s.Hash()), "6800c580a44bb4db5ed6add7ed8bdbd2f947363d968a3fe85fbed94b2caa1b7d"; got != want {
		t.Errorf("Hash = %s, want %s", got, want)
	}
	if got, want := k.CurrentKeyID(), "kd483780fc815"; got != want {
		t.Errorf("KeyID = %q, want %q", got, want)
	}
}

// A Secret that ends up in a log line or an error message must not give the
// bearer value away.
func TestSecretRedacted(t *testing.T) {
	k := mustKeyring(t, testKey)
	s := mustDerive(t, k, k.CurrentKeyID(), "acme", "tok_1", NewNonce())
	body := s.Reveal()[len(SecretPrefix):]

	type request struct {
		Token  Secret
		Tokens []Secret
		ByID   map[string]Secret
		Ptr    *Secret
	}
	r := request{Token: s, Tokens: []Secret{s}, ByID: map[string]Secret{"tok_1": s}, Ptr: &s}
	outputs := map[string]string{
		"%v %s %#v":   fmt.Sprintf("%v %s %#v", s, s, s),
		"%q %x %X":    fmt.Sprintf("%q %x %X", s, s, s),
		"struct %+v":  fmt.Sprintf("%+v", r),
		"struct %#v":  fmt.Sprintf("%#v", r),
		"struct %v":   fmt.Sprintf("%v", r),
		"Sprint":      fmt.Sprint(s),
		"Sprintln":    fmt.Sprintln(s),
		"wrapped err": fmt.Errorf("spend %v: %w", s, ErrExpired).Error(),
		"String":      s.String(),
		"GoString":    s.GoString(),
	}
	for name, out := range outputs {
		if strings.Contains(out, body) {
			t.Errorf("%s: %q contains the secret", name, out)
		}
		// Checking for a fragment too catches a partial leak.
		if strings.Contains(out, body[:8]) {
			t.Errorf("%s: %q contains part of the secret", name, out)
		}
	}
	if !strings.HasPrefix(s.String(), SecretPrefix) {
		t.Errorf("String() = %q, want the prefix kept so the kind of value stays recognisable", s.String())
	}
	if s.Reveal() == s.String() {
		t.Error("Reveal() is redacted too")
	}
}

// nonCanonical returns secret with the unused low bits of its last character
// set, which a lenient base64 decoder maps to the same bytes.
func nonCanonical(secret string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, secret[len(secret)-1])
	return secret[:len(secret)-1] + string(alphabet[last|1])
}
