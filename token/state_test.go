package token

import (
	"errors"
	"slices"
	"testing"
)

// allActions is every Action the package declares. It is written out here
// rather than taken from the transition map, so that an action the map
// forgets still gets checked against every state.
var allActions = []Action{
	Spend, SpendFail, Lease,
	Complete, Fail, ReportUnknown, Takeover, LeaseLapse,
	ReconcileSucceeded, ReconcileNotExecuted, ReconcileFailed,
	Revoke, Expire,
}

// wantNext is the state diagram of DESIGN.md, copied by hand. Any (state,
// action) pair missing here must be rejected by Next.
var wantNext = map[State]map[Action]State{
	Issued: {
		Spend:     Consumed,
		SpendFail: Failed,
		Lease:     Pending,
		Revoke:    Revoked,
		Expire:    Expired,
	},
	Pending: {
		Complete:      Consumed,
		Fail:          Failed,
		ReportUnknown: Unknown,
		Takeover:      Pending,
		LeaseLapse:    Unknown,
	},
	Unknown: {
		ReconcileSucceeded:   Consumed,
		ReconcileNotExecuted: Issued,
		ReconcileFailed:      Failed,
	},
}

func TestStatesList(t *testing.T) {
	want := []State{Issued, Pending, Consumed, Failed, Unknown, Revoked, Expired}
	if !slices.Equal(States, want) {
		t.Fatalf("States = %v, want %v", States, want)
	}
}

func TestNext(t *testing.T) {
	// The zero State is not a state, so nothing may move it.
	for _, from := range append(slices.Clone(States), State("")) {
		for _, a := range allActions {
			to, err := Next(from, a)
			want, allowed := wantNext[from][a]
			switch {
			case allowed && err != nil:
				t.Errorf("Next(%q, %q) = error %v, want %q", from, a, err, want)
			case allowed && to != want:
				t.Errorf("Next(%q, %q) = %q, want %q", from, a, to, want)
			case !allowed && !errors.Is(err, ErrInvalidTransition):
				t.Errorf("Next(%q, %q) = %q, %v; want ErrInvalidTransition", from, a, to, err)
			case !allowed && to != "":
				t.Errorf("Next(%q, %q) returned state %q along with its error", from, a, to)
			}
		}
	}
}

func TestNextUnknownAction(t *testing.T) {
	for _, from := range States {
		if _, err := Next(from, Action("purge")); !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("Next(%q, purge) error = %v, want ErrInvalidTransition", from, err)
		}
	}
}

// A terminal state is one the token never leaves; purging removes the row,
// it is not a transition.
func TestNoActionLeavesTerminalState(t *testing.T) {
	for _, from := range States {
		if !from.Terminal() {
			continue
		}
		for _, a := range allActions {
			if to, err := Next(from, a); err == nil {
				t.Errorf("Next(%q, %q) = %q, want no way out of a terminal state", from, a, to)
			}
		}
	}
}

// Terminal must agree with the transition map: a state is terminal exactly
// when no action applies to it.
func TestTerminalMatchesTransitions(t *testing.T) {
	for _, from := range States {
		canMove := false
		for _, a := range allActions {
			if _, err := Next(from, a); err == nil {
				canMove = true
			}
		}
		if from.Terminal() == canMove {
			t.Errorf("%q: Terminal() = %v, but some action applies = %v", from, from.Terminal(), canMove)
		}
	}
}

// Pending and unknown tokens must be reported, never expired or revoked
// behind the holder's or the operator's back.
func TestUnresolvedCannotExpireOrBeRevoked(t *testing.T) {
	for _, from := range States {
		if !from.Unresolved() {
			continue
		}
		for _, a := range []Action{Expire, Revoke} {
			if to, err := Next(from, a); err == nil {
				t.Errorf("Next(%q, %q) = %q, want ErrInvalidTransition", from, a, to)
			}
		}
	}
}

func TestTerminalUnresolved(t *testing.T) {
	tests := []struct {
		s                    State
		terminal, unresolved bool
	}{
		{Issued, false, false},
		{Pending, false, true},
		{Consumed, true, false},
		{Failed, true, false},
		{Unknown, false, true},
		{Revoked, true, false},
		{Expired, true, false},
		{"", false, false},
		{"purged", false, false},
	}
	for _, tt := range tests {
		if got := tt.s.Terminal(); got != tt.terminal {
			t.Errorf("%q.Terminal() = %v, want %v", tt.s, got, tt.terminal)
		}
		if got := tt.s.Unresolved(); got != tt.unresolved {
			t.Errorf("%q.Unresolved() = %v, want %v", tt.s, got, tt.unresolved)
		}
	}
}

func TestParseState(t *testing.T) {
	for _, s := range States {
		got, err := ParseState(string(s))
		if err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v; want %q, nil", s, got, err, s)
		}
	}
	for _, in := range []string{"", "ISSUED", "Issued", " issued", "issued ", "issued\x00", "purged", "unknown_"} {
		if got, err := ParseState(in); err == nil {
			t.Errorf("ParseState(%q) = %q, nil; want an error", in, got)
		}
	}
}

func TestBumpsGeneration(t *testing.T) {
	// The actions that (re)grant execution rights: a lease, a takeover after
	// the lease lapsed, and an operator declaring the effect never happened.
	want := map[Action]bool{
		Lease:                true,
		Takeover:             true,
		ReconcileNotExecuted: true,
	}
	for _, a := range allActions {
		if got := a.BumpsGeneration(); got != want[a] {
			t.Errorf("%q.BumpsGeneration() = %v, want %v", a, got, want[a])
		}
	}
}

// Every way into pending grants execution rights, so it must bump the
// generation; otherwise a stale holder could finish a takeover's work.
func TestEnteringPendingBumpsGeneration(t *testing.T) {
	for _, from := range States {
		for _, a := range allActions {
			if to, err := Next(from, a); err == nil && to == Pending && !a.BumpsGeneration() {
				t.Errorf("Next(%q, %q) = pending but the action does not bump the generation", from, a)
			}
		}
	}
}
