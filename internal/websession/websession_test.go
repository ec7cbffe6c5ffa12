package websession

import (
	"net/http/httptest"
	"testing"
)

func TestSignerRoundTripAndTamper(t *testing.T) {
	t.Parallel()
	type value struct{ User string }
	s := NewSigner("server-key-0123456789abcdef0123456789", "purpose a")
	signed, err := s.Sign(value{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	var got value
	if !s.Verify(signed, &got) || got.User != "alice" {
		t.Fatalf("Verify(Sign(v)) = %v, %+v", s.Verify(signed, &got), got)
	}
	other := NewSigner("server-key-0123456789abcdef0123456789", "purpose b")
	for name, v := range map[string]string{
		"another purpose's signer": "",
		"changed body":             "f" + signed[1:], // Sign(v) starts "e", from `{`
		"changed signature":        signed[:len(signed)-1] + "A",
		"no signature":             signed[:len(signed)-44],
		"empty":                    "",
	} {
		verifier, in := s, v
		if name == "another purpose's signer" {
			verifier, in = other, signed
		}
		if verifier.Verify(in, &got) {
			t.Errorf("%s: verified", name)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, origin, referer string
		want                  bool
	}{
		{"same origin", "http://example.test", "", true},
		{"referer fallback", "", "http://example.test/console/tokens", true},
		{"other site", "http://evil.test", "", false},
		{"other site in referer", "", "http://evil.test/x", false},
		{"neither header", "", "", false},
		{"origin wins over referer", "http://evil.test", "http://example.test/", false},
		{"null origin", "null", "", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("POST", "http://example.test/console/revoke", nil)
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if tc.referer != "" {
			r.Header.Set("Referer", tc.referer)
		}
		if got := SameOrigin(r); got != tc.want {
			t.Errorf("%s: SameOrigin = %v, want %v", tc.name, got, tc.want)
		}
	}
}
