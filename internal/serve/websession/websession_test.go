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

// TestSameOriginComparesScheme: an http:// page of the host is another
// origin than the console served over HTTPS, and the other way round.
func TestSameOriginComparesScheme(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, xfp, origin string
		want                   bool
	}{
		{"http page, https request", "https://example.test/console/revoke", "", "http://example.test", false},
		{"https page, https request", "https://example.test/console/revoke", "", "https://example.test", true},
		{"https page, https behind a proxy", "http://example.test/console/revoke", "https", "https://example.test", true},
		{"http page, https behind a proxy", "http://example.test/console/revoke", "https", "http://example.test", false},
		{"https page, http request", "http://example.test/console/revoke", "", "https://example.test", false},
		{"default port named", "https://example.test/console/revoke", "", "https://example.test:443", true},
		{"another port", "http://example.test/console/revoke", "", "http://example.test:8081", false},
		{"no host", "http://example.test/console/revoke", "", "http://", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest("POST", tc.url, nil)
		if tc.xfp != "" {
			r.Header.Set("X-Forwarded-Proto", tc.xfp)
		}
		r.Header.Set("Origin", tc.origin)
		if got := SameOrigin(r); got != tc.want {
			t.Errorf("%s: SameOrigin = %v, want %v", tc.name, got, tc.want)
		}
	}
}
