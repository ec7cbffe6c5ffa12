package cache

import (
	"errors"
	"strings"
	"testing"

	"github.com/tokend/tokend/token"
)

// TestVersionRisesWithEveryTransition checks version against the state
// machine itself: for every transition token.Next allows, from a few
// generations, the version after is greater than the version before.
func TestVersionRisesWithEveryTransition(t *testing.T) {
	actions := []token.Action{
		token.Spend, token.SpendFail, token.Lease, token.Complete, token.Fail,
		token.ReportUnknown, token.Takeover, token.LeaseLapse, token.ReconcileSucceeded,
		token.ReconcileNotExecuted, token.ReconcileFailed, token.Revoke, token.Expire,
	}
	allowed := 0
	for _, from := range token.States {
		for _, a := range actions {
			to, err := token.Next(from, a)
			if errors.Is(err, token.ErrInvalidTransition) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			allowed++
			for _, gen := range []int64{0, 1, 41} {
				next := gen
				if a.BumpsGeneration() {
					next++
				}
				before, ok1 := version(from, gen)
				after, ok2 := version(to, next)
				if !ok1 || !ok2 || after <= before {
					t.Errorf("%s --%s--> %s at generation %d: version %d -> %d (ok %v, %v), want it to rise",
						from, a, to, gen, before, after, ok1, ok2)
				}
			}
		}
	}
	if allowed < len(actions) {
		t.Fatalf("only %d transitions allowed: is the action list out of date?", allowed)
	}
}

func TestVersionRefuses(t *testing.T) {
	tests := []struct {
		state token.State
		gen   int64
	}{
		{"", 0},
		{"purged", 0},
		{token.Issued, -1},
		{token.Consumed, maxVersion / 10},
	}
	for _, tt := range tests {
		if v, ok := version(tt.state, tt.gen); ok {
			t.Errorf("version(%q, %d) = %d, want not ok", tt.state, tt.gen, v)
		}
	}
}

// TestSealRefusesWhatItDidNotMake: an entry unseals only under the key it
// was sealed for and with the MAC key that sealed it; any change to it, or
// a value no Cache made, is refused.
func TestSealRefusesWhatItDidNotMake(t *testing.T) {
	c := &Cache{macKey: MACKey([]byte("server key server key server key!"))}
	other := &Cache{macKey: MACKey([]byte("another server key, another one!"))}
	good := c.seal("k", 13, []byte("{}"))
	if v, body, ok := c.unseal("k", good); !ok || v != 13 || body != "{}" {
		t.Fatalf("unseal(seal) = %d, %q, %v", v, body, ok)
	}
	if v, body, ok := c.unseal("k", c.seal("k", 7, nil)); !ok || v != 7 || body != "" {
		t.Fatalf("unseal of a tombstone = %d, %q, %v", v, body, ok)
	}
	vs, rest, _ := strings.Cut(good, ":")
	mac, _, _ := strings.Cut(rest, ":")
	tests := []struct{ name, key, raw string }{
		{"moved to another key", "k2", good},
		{"another MAC key", "k", other.seal("k", 13, []byte("{}"))},
		{"body changed", "k", vs + ":" + mac + ":{ }"},
		{"version raised", "k", "14:" + mac + ":{}"},
		{"tombstone made from an entry", "k", vs + ":" + mac + ":"},
		{"no MAC", "k", "13:{}"},
		{"empty MAC", "k", "13::{}"},
		{"empty", "k", ""},
		{"not an entry", "k", "hello"},
		{"negative version", "k", "-1:" + mac + ":{}"},
	}
	for _, tt := range tests {
		if v, body, ok := c.unseal(tt.key, tt.raw); ok {
			t.Errorf("%s: unseal(%q, %q) = %d, %q, accepted", tt.name, tt.key, tt.raw, v, body)
		}
	}
}

// TestSealPreviousKeys: entries sealed under a previous MAC key are read,
// so that instances on either side of a key rotation share the cache; a
// key no longer listed (retired) is not.
func TestSealPreviousKeys(t *testing.T) {
	old, cur := MACKey([]byte("old server key")), MACKey([]byte("new server key"))
	before := &Cache{macKey: old}
	after := &Cache{macKey: cur, oldMACs: [][]byte{old}}
	retired := &Cache{macKey: cur}
	raw := before.seal("k", 3, []byte("{}"))
	if _, _, ok := after.unseal("k", raw); !ok {
		t.Error("an entry sealed under a previous key was refused")
	}
	if _, _, ok := retired.unseal("k", raw); ok {
		t.Error("an entry sealed under a retired key was accepted")
	}
	if got := after.seal("k", 3, []byte("{}")); got != (&Cache{macKey: cur}).seal("k", 3, []byte("{}")) {
		t.Error("a previous key was used to seal")
	}
}

func TestMACKeyIsDerived(t *testing.T) {
	a, b := MACKey([]byte("k1")), MACKey([]byte("k2"))
	if len(a) != 32 || string(a) == string(b) || string(a) == "k1" {
		t.Fatalf("MACKey = %x, %x", a, b)
	}
	if string(MACKey([]byte("k1"))) != string(a) {
		t.Fatal("MACKey is not deterministic")
	}
}
