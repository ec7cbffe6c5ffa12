package token

import (
	"errors"
	"fmt"

	"github.com/tokend/tokend"
)

// State is where a token is in its life. The zero value is not a valid state.
type State string

// The states of DESIGN.md. A purged token has no state: its row is gone.
const (
	Issued   State = "issued"
	Pending  State = "pending"
	Consumed State = "consumed"
	Failed   State = "failed"
	Unknown  State = "unknown"
	Revoked  State = "revoked"
	Expired  State = "expired"
)

// States lists every state, in lifecycle order.
var States = []State{Issued, Pending, Consumed, Failed, Unknown, Revoked, Expired}

// ParseState returns the State named s.
func ParseState(s string) (State, error) {
	for _, st := range States {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("token: unknown state %q", s)
}

// Terminal reports whether no action can move the token out of s; terminal
// tokens are purged once their retention has passed.
func (s State) Terminal() bool {
	switch s {
	case Consumed, Failed, Revoked, Expired:
		return true
	}
	return false
}

// Unresolved reports whether s needs someone to finish or reconcile it. Such
// tokens are never expired or purged silently.
func (s State) Unresolved() bool { return s == Pending || s == Unknown }

// Action is something that happens to a token.
type Action string

// The actions that move a token.
const (
	Spend                Action = "spend"                  // atomic spend, business succeeded
	SpendFail            Action = "spend_fail"             // atomic spend, business declared a final failure
	Lease                Action = "lease"                  // lease-mode spend grants execution rights
	Complete             Action = "complete"               // lease holder reports success
	Fail                 Action = "fail"                   // lease holder reports a final failure
	ReportUnknown        Action = "report_unknown"         // lease holder cannot tell what happened
	Takeover             Action = "takeover"               // lease expired, policy grants a new generation
	LeaseLapse           Action = "lease_lapse"            // lease expired, policy waits for an operator
	ReconcileSucceeded   Action = "reconcile_succeeded"    // operator: the effect happened
	ReconcileNotExecuted Action = "reconcile_not_executed" // operator: it did not; may be spent again
	ReconcileFailed      Action = "reconcile_failed"       // operator: it failed for good
	Revoke               Action = "revoke"
	Expire               Action = "expire"
)

// Verb is a in the words of a refusal, "cannot VERB a token that is
// consumed": the action as a user asked for it, not its event kind.
func (a Action) Verb() string {
	switch a {
	case SpendFail:
		return "spend"
	case ReportUnknown:
		return "report an unknown outcome for"
	case Takeover:
		return "take over"
	case LeaseLapse:
		return "let the lease lapse on"
	case ReconcileSucceeded:
		return "reconcile as succeeded"
	case ReconcileNotExecuted:
		return "reconcile as not executed"
	case ReconcileFailed:
		return "reconcile as failed"
	}
	return string(a)
}

// ErrInvalidTransition is returned by Next for an action not allowed in a state.
var ErrInvalidTransition = errors.New("token: invalid transition")

var transitions = map[State]map[Action]State{
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

// Next returns the state a token in from moves to when a happens, or an error
// wrapping ErrInvalidTransition.
func Next(from State, a Action) (State, error) {
	if to, ok := transitions[from][a]; ok {
		return to, nil
	}
	return "", tokend.Refuse(ErrInvalidTransition, "%s from %s", a, from)
}

// BumpsGeneration reports whether a grants execution rights anew, so that a
// holder of the previous generation can no longer finish.
func (a Action) BumpsGeneration() bool {
	return a == Lease || a == Takeover || a == ReconcileNotExecuted
}
