package keytext

import (
	"encoding/base64"
	"strings"
	"testing"
)

// FuzzWellFormed checks the shape test that runs before any database lookup:
// it never panics, and whatever it accepts is a prefix and exactly 256 bits
// in the one canonical spelling.
func FuzzWellFormed(f *testing.F) {
	for _, s := range []string{
		SecretPrefix + strings.Repeat("A", 43),
		SecretPrefix + strings.Repeat("A", 42) + "B", // non-zero padding bits
		SecretPrefix + strings.Repeat("A", 42) + "\n",
		SecretPrefix, "", "Bearer x", "tks_" + strings.Repeat("A", 43),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !WellFormed(s) {
			return
		}
		body, ok := strings.CutPrefix(s, SecretPrefix)
		if !ok {
			t.Fatalf("accepted %q without the prefix", s)
		}
		b, err := base64.RawURLEncoding.DecodeString(body)
		if err != nil || len(b) != SecretBytes || base64.RawURLEncoding.EncodeToString(b) != body {
			t.Fatalf("accepted %q, which is not the canonical spelling of %d bytes", s, SecretBytes)
		}
	})
}
