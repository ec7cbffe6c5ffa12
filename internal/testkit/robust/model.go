package robust

import (
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what a recorded request asked for.
type Kind string

// The kinds of request the traffic sends.
const (
	KindIssue     Kind = "issue"
	KindSpend     Kind = "spend" // atomic (ledger.credit) or lease, by Input.Lease
	KindComplete  Kind = "complete"
	KindFail      Kind = "fail"
	KindUnknown   Kind = "report_unknown"
	KindRevoke    Kind = "revoke"
	KindReconcile Kind = "reconcile"
	KindGet       Kind = "get"
	KindList      Kind = "list" // one token of a list's page: a read of it
)

// Input is one request: what the client sent.
type Input struct {
	Kind   Kind
	Intent string // the partition: every request is about one intent's token
	Lease  bool   // the intent's operation is the lease-mode one
	// ShortLease: the lease operation of 1 s, whose lapsed leases the
	// sweeper (or a spend) turns unknown.
	ShortLease bool
	Filter     string // list: the state filter, "" for none
	// Fingerprint tells issue requests apart: 0 is the intent's own
	// payload, anything else a changed one (expect 422).
	Fingerprint int
	PayloadOK   bool   // spend: the payload the token was issued for
	Amount      int64  // atomic spend: what ledger.credit credits the intent's account
	Generation  int64  // complete, fail, report_unknown
	Outcome     string // reconcile: succeeded, not_executed, failed
	// CallWall and ReturnWall are the request's start and end on the wall
	// clock (Unix ns), for expiry, which the server decides by its clock.
	CallWall, ReturnWall int64
}

// Output is what the client got back. Unknown is true when no answer
// arrived (timeout, reset connection) or the answer does not say whether
// the request took effect (5xx): the request may or may not have happened.
type Output struct {
	Unknown   bool
	Status    int
	Code      string // problem code of an error answer
	Replayed  bool   // Idempotent-Replayed: true
	ID        string // issue: token id
	Secret    string // issue: the secret
	ExpiresAt int64  // issue: Unix ns
	State     string // get, spend, lease, reports: the state answered
	Gen       int64  // lease, get: generation answered
	Body      string // spend: the body as sent (replays must repeat it)
	LeaseEnd  int64  // lease spend: lease_expires_at, Unix ns
	Err       string // the transport error of an unknown outcome
}

// State is the model's view of one intent's token. It is comparable, so
// Porcupine's default equality works on it.
type State struct {
	Exists      bool
	ID, Secret  string // "" until an answer told them (the issue's outcome was unknown)
	ExpiresAt   int64
	Fingerprint int
	State       string // issued, pending, consumed, failed, unknown, revoked, expired
	Gen         int64
	LeaseEnd    int64 // pending: when the lease ends (Unix ns); 0 when no answer told it
	// OutStatus and OutBody are the stored outcome later spends replay;
	// 0 and "" until an answer showed it.
	OutStatus int
	OutBody   string
}

// ExpiryTolerance is how far the server's clock (Postgres's now()) may be
// from the recorder's: an answer within this of the expiry may say either.
var ExpiryTolerance = 250 * time.Millisecond

// mayBeLive: the token may still have been unexpired at some point of the
// request.
func (s State) mayBeLive(in Input) bool {
	return s.ExpiresAt == 0 || in.CallWall <= s.ExpiresAt+int64(ExpiryTolerance)
}

// mayBeExpired: the token may have passed its expiry by the request's end.
func (s State) mayBeExpired(in Input) bool {
	return s.ExpiresAt != 0 && in.ReturnWall >= s.ExpiresAt-int64(ExpiryTolerance)
}

// Model is the sequential specification of one intent's token, as a
// Porcupine model partitioned by intent. Requests with an unknown outcome
// step to both "it happened" and "it did not".
var Model = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			k := op.Input.(Input).Intent
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{State{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(State), input.(Input), output.(Output)
		var next []State
		for _, c := range lapse(s, in) {
			if out.Unknown {
				next = append(next, c) // it did not happen (or changed nothing)
				next = append(next, effects(c, in)...)
			} else {
				next = append(next, step(c, in, out)...)
			}
		}
		res := make([]any, 0, len(next))
		for i, n := range next {
			if !slices.Contains(next[:i], n) {
				res = append(res, n)
			}
		}
		return res
	},
	DescribeOperation: func(input, output any) string { return describe(input.(Input), output.(Output)) },
	DescribeState:     func(state any) string { return describeStates(state) },
}).ToModel()

// lapse lists the states s may be in when in takes effect: s, and for a
// short lease that may have ended by the request's end, unknown as well
// (the operation's policy), whether the sweeper or the request itself
// records it. A lease whose end no answer told may have lapsed at any time.
func lapse(s State, in Input) []State {
	if !in.ShortLease || s.State != "pending" || s.LeaseEnd != 0 && in.ReturnWall < s.LeaseEnd-int64(ExpiryTolerance) {
		return []State{s}
	}
	n := s
	n.State = "unknown"
	return []State{s, n}
}

// effects lists what a request with no answer may have done to s.
func effects(s State, in Input) []State {
	switch in.Kind {
	case KindIssue:
		if !s.Exists {
			return []State{{Exists: true, Fingerprint: in.Fingerprint, State: "issued"}}
		}
	case KindSpend:
		if !in.PayloadOK || !s.Exists || (s.State != "issued") || !s.mayBeLive(in) {
			break
		}
		n := s
		if in.Lease {
			n.State, n.Gen, n.LeaseEnd = "pending", 0, 0 // generation learnt from a later answer
		} else {
			n.State, n.OutStatus, n.OutBody = "consumed", 0, ""
		}
		return []State{n}
	case KindComplete, KindFail, KindUnknown:
		if s.State == "pending" && (s.Gen == in.Generation || s.Gen == 0) {
			n := s
			n.State, n.Gen, n.OutStatus, n.OutBody = reportTarget(in.Kind), in.Generation, 0, ""
			return []State{n}
		}
	case KindRevoke:
		if s.State == "issued" && s.mayBeLive(in) {
			n := s
			n.State = "revoked"
			return []State{n}
		}
	case KindReconcile:
		if s.State == "unknown" {
			n := s
			n.State, n.OutStatus, n.OutBody = reconcileTarget(in.Outcome), 0, ""
			if n.State == "issued" {
				n.Gen = 0 // bumped; learnt from a later answer
			}
			return []State{n}
		}
	}
	return nil
}

func reportTarget(k Kind) string {
	switch k {
	case KindComplete:
		return "consumed"
	case KindFail:
		return "failed"
	}
	return "unknown"
}

func reconcileTarget(outcome string) string {
	switch outcome {
	case "succeeded":
		return "consumed"
	case "failed":
		return "failed"
	}
	return "issued"
}

// one is a helper for the single next state of a legal answer.
func one(s State) []State { return []State{s} }

// step lists the states after a request that got a definite answer out;
// none when no correct server could have answered out in state s.
func step(s State, in Input, out Output) []State {
	// A token past its expiry is expired in every read: a request that may
	// have seen it expired may have fixed it so.
	if s.State == "issued" && !s.mayBeLive(in) {
		s.State = "expired"
	}
	if out.Status == 429 {
		return one(s) // rate limited: refused before anything was read
	}
	switch in.Kind {
	case KindIssue:
		return stepIssue(s, in, out)
	case KindSpend:
		return stepSpend(s, in, out)
	case KindComplete, KindFail, KindUnknown:
		return stepReport(s, in, out)
	case KindRevoke:
		switch {
		case out.Status == 200 && s.State == "issued":
			s.State = "revoked"
			return one(s)
		case out.Status == 409 && out.Code == "invalid_state" && s.State != "issued":
			return one(s)
		case (out.Status == 409 || out.Status == 410) && s.State == "issued" && s.mayBeExpired(in):
			s.State = "expired"
			return one(s)
		}
	case KindReconcile:
		switch {
		case out.Status == 200 && s.State == "unknown":
			s.State, s.OutStatus, s.OutBody = reconcileTarget(in.Outcome), 0, ""
			if s.State == "issued" {
				s.Gen = 0
			}
			return one(s)
		case out.Status == 409 && s.State != "unknown":
			return one(s)
		}
	case KindGet, KindList:
		if out.Status != 200 || !s.Exists || in.Filter != "" && out.State != in.Filter {
			return nil
		}
		if s.ID != "" && out.ID != "" && out.ID != s.ID {
			return nil
		}
		switch {
		case out.State == s.State:
		case out.State == "expired" && s.State == "issued" && s.mayBeExpired(in):
			s.State = "expired"
		default:
			return nil
		}
		if s.Gen != 0 && out.Gen != s.Gen && (s.State == "pending" || s.State == "unknown") {
			return nil
		}
		if s.Gen == 0 {
			s.Gen = out.Gen
		}
		return one(s)
	}
	return nil
}

func stepIssue(s State, in Input, out Output) []State {
	if !s.Exists {
		if out.Status != 201 || out.Replayed || in.Fingerprint != 0 {
			return nil
		}
		return one(State{Exists: true, ID: out.ID, Secret: out.Secret, ExpiresAt: out.ExpiresAt,
			Fingerprint: in.Fingerprint, State: "issued"})
	}
	if in.Fingerprint != s.Fingerprint {
		if out.Status == 422 && out.Code == "idempotency_key_reused" {
			return one(s)
		}
		return nil
	}
	// A replay answers the first answer: same id, same secret.
	if out.Status != 201 || !out.Replayed {
		return nil
	}
	if s.ID == "" {
		s.ID, s.Secret, s.ExpiresAt = out.ID, out.Secret, out.ExpiresAt
		return one(s)
	}
	if out.ID != s.ID || out.Secret != s.Secret {
		return nil
	}
	return one(s)
}

func stepSpend(s State, in Input, out Output) []State {
	if !s.Exists {
		return nil
	}
	// Refusals that change nothing, whatever the state.
	if out.Status == 409 && out.Code == "in_progress" {
		return one(s)
	}
	if !in.PayloadOK {
		// Refused, whichever check comes first; never spent.
		if out.Status == 422 && out.Code == "payload_mismatch" {
			return one(s)
		}
		if out.Status < 400 {
			return nil
		}
		in.PayloadOK = true // the state's own refusal, checked below
		if next := stepSpend(s, in, out); len(next) == 1 && next[0].State == s.State || next != nil && out.Code == "token_expired" {
			return next
		}
		return nil
	}
	switch s.State {
	case "issued":
		if in.Lease && out.Status == 202 && !out.Replayed && out.State == "pending" && out.Gen > s.Gen {
			s.State, s.Gen, s.LeaseEnd = "pending", out.Gen, out.LeaseEnd
			return one(s)
		}
		if !in.Lease && out.Status == 200 && !out.Replayed && out.State == "consumed" {
			s.State, s.OutStatus, s.OutBody = "consumed", out.Status, out.Body
			return one(s)
		}
		if out.Status == 410 && out.Code == "token_expired" && s.mayBeExpired(in) {
			s.State = "expired"
			return one(s)
		}
	case "expired":
		if out.Status == 410 && out.Code == "token_expired" {
			return one(s)
		}
	case "revoked":
		if out.Status == 410 && out.Code == "token_revoked" {
			return one(s)
		}
	case "pending":
		if out.Status == 409 && (out.Code == "in_progress" || out.Code == "stale_generation") {
			return one(s)
		}
	case "unknown":
		if out.Status == 409 && out.Code == "outcome_unknown" {
			return one(s)
		}
	case "consumed", "failed":
		// A replay: the stored status and body, byte for byte.
		if !out.Replayed {
			return nil
		}
		if s.OutStatus == 0 {
			s.OutStatus, s.OutBody = out.Status, out.Body
			return one(s)
		}
		if out.Status == s.OutStatus && out.Body == s.OutBody {
			return one(s)
		}
	}
	return nil
}

func stepReport(s State, in Input, out Output) []State {
	target := reportTarget(in.Kind)
	matches := s.Gen == in.Generation || s.Gen == 0
	switch {
	case out.Status == 200 && s.State == "pending" && matches:
		s.State, s.Gen, s.OutStatus, s.OutBody = target, in.Generation, 0, ""
		return one(s)
	case out.Status == 200 && s.State == target && s.Gen == in.Generation:
		return one(s) // the same report again
	case out.Status == 409 && !(s.State == "pending" && s.Gen == in.Generation):
		return one(s)
	case out.Status == 410 && (s.State == "expired" || s.State == "revoked"):
		return one(s)
	}
	return nil
}

func describe(in Input, out Output) string {
	var what string
	switch in.Kind {
	case KindIssue:
		what = fmt.Sprintf("issue(%s, fingerprint %d)", in.Intent, in.Fingerprint)
	case KindSpend:
		mode := "atomic"
		if in.Lease {
			mode = "lease"
		}
		pay := "payload ok"
		if !in.PayloadOK {
			pay = "payload changed"
		}
		what = fmt.Sprintf("spend(%s, %s, %s)", in.Intent, mode, pay)
	case KindComplete, KindFail, KindUnknown:
		what = fmt.Sprintf("%s(%s, gen %d)", in.Kind, in.Intent, in.Generation)
	case KindReconcile:
		what = fmt.Sprintf("reconcile(%s, %s)", in.Intent, in.Outcome)
	case KindList:
		what = fmt.Sprintf("list(%s, state filter %q)", in.Intent, in.Filter)
	default:
		what = fmt.Sprintf("%s(%s)", in.Kind, in.Intent)
	}
	return what + " -> " + describeOutput(out)
}

func describeOutput(out Output) string {
	if out.Unknown {
		if out.Status != 0 {
			return fmt.Sprintf("unknown outcome (%d %s)", out.Status, out.Code)
		}
		return "unknown outcome (" + out.Err + ")"
	}
	s := fmt.Sprint(out.Status)
	if out.Code != "" {
		s += " " + out.Code
	}
	if out.Replayed {
		s += " replayed"
	}
	if out.ID != "" {
		s += " id=" + out.ID
	}
	if out.State != "" {
		s += " state=" + out.State
	}
	if out.Gen != 0 {
		s += fmt.Sprintf(" gen=%d", out.Gen)
	}
	if out.Body != "" && len(out.Body) <= 120 {
		s += " body=" + out.Body
	}
	return s
}

func describeStates(state any) string {
	states, ok := state.([]any)
	if !ok {
		return fmt.Sprint(state)
	}
	var b []byte
	for i, st := range states {
		if i > 0 {
			b = append(b, " | "...)
		}
		s := st.(State)
		if !s.Exists {
			b = append(b, "absent"...)
			continue
		}
		b = fmt.Appendf(b, "%s %s gen %d", s.ID, s.State, s.Gen)
	}
	return string(b)
}
