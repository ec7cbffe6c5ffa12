package cache

import (
	"errors"
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

func TestDecode(t *testing.T) {
	tests := []struct {
		raw  string
		v    int64
		body string
		ok   bool
	}{
		{"13:{}", 13, "{}", true},
		{"13:", 13, "", true},
		{"0:a:b", 0, "a:b", true},
		{"", 0, "", false},
		{"13", 0, "", false},
		{"-1:{}", 0, "", false},
		{"x:{}", 0, "", false},
		{"99999999999999999999:{}", 0, "", false},
	}
	for _, tt := range tests {
		v, body, ok := decode(tt.raw)
		if v != tt.v || body != tt.body || ok != tt.ok {
			t.Errorf("decode(%q) = %d, %q, %v, want %d, %q, %v", tt.raw, v, body, ok, tt.v, tt.body, tt.ok)
		}
		if ok {
			if got := encode(v, []byte(body)); got != tt.raw {
				t.Errorf("encode(decode(%q)) = %q", tt.raw, got)
			}
		}
	}
}
