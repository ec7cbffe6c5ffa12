package dispatch_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/tokend/tokend/internal/infra/dispatch"
)

// TestFullWidthSpellingsRefusedAtRegistration: a host written in full-width
// or other compatibility forms is judged as the name it is looked up as,
// so 127.0.0.1 and localhost spelled so are refused at registration, not
// only at every attempt.
func TestFullWidthSpellingsRefusedAtRegistration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		want error
	}{
		{"http://１２７．０．０．１/", dispatch.ErrHostNotAllowed},
		{"http://１２７.0.0.1:8080/", dispatch.ErrHostNotAllowed},
		{"http://ｌｏｃａｌｈｏｓｔ/", dispatch.ErrHostNotAllowed},
		{"http://LOCALHOST｡/", dispatch.ErrHostNotAllowed},
		{"http://api.ｌｏｃａｌｈｏｓｔ/", dispatch.ErrHostNotAllowed},
		{"http://１６９．２５４．１６９．２５４/", dispatch.ErrHostNotAllowed},
		{"http://２１３０７０６４３３/", dispatch.ErrInvalidRequest},
		{"http://bücher.example/", nil},
		{"http://hooks.ｅｘａｍｐｌｅ/", nil},
	} {
		if err := dispatch.CheckURL(c.url, nil); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckURL(%q) = %v, want %v", c.url, err, c.want)
		}
	}
}

// TestTheHostsOwnAddressesAreRefused: an address of one of the server's own
// interfaces, public or not, is refused at registration and when dialed,
// unless TOKEND_WEBHOOK_ALLOWED_HOSTS allows it.
func TestTheHostsOwnAddressesAreRefused(t *testing.T) {
	restore := dispatch.PretendOwnAddresses("198.51.99.7")
	defer restore()
	if err := dispatch.CheckURL("http://198.51.99.7/in", nil); !errors.Is(err, dispatch.ErrHostNotAllowed) {
		t.Errorf("the host's own public address: %v, want ErrHostNotAllowed", err)
	}
	if err := dispatch.CheckURL("http://198.51.99.8/in", nil); err != nil {
		t.Errorf("another public address: %v", err)
	}
	if err := dispatch.CheckURL("http://198.51.99.7/in", []string{"198.51.99.7"}); err != nil {
		t.Errorf("the own address the operator allowed: %v", err)
	}
	if !dispatch.Refused(netip.MustParseAddr("198.51.99.7")) || dispatch.Refused(netip.MustParseAddr("198.51.99.8")) {
		t.Error("the dialer's judgment differs from registration's")
	}
}
