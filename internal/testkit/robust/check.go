package robust

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Event is one event of the feed (GET /v1/events), as the checker needs it.
type Event struct {
	ID         string
	Position   int64
	TokenID    string
	From       string // "" for the issue
	To         string
	Generation int64
}

// Result is what Check found. Problems is empty when the history is
// linearizable and the feed and the ledger agree with it.
type Result struct {
	Linearizable  porcupine.CheckResult
	Problems      []string
	Visualization string // path of Porcupine's HTML page of the failing intents, if any
}

// OK reports whether nothing was found.
func (r Result) OK() bool { return len(r.Problems) == 0 && r.Linearizable == porcupine.Ok }

// Report is the problems, one paragraph each.
func (r Result) Report() string {
	var b strings.Builder
	if r.Linearizable != porcupine.Ok {
		fmt.Fprintf(&b, "linearizability: %s\n", r.Linearizable)
	}
	for _, p := range r.Problems {
		b.WriteString(p)
		b.WriteString("\n")
	}
	if r.Visualization != "" {
		fmt.Fprintf(&b, "visualization: %s\n", r.Visualization)
	}
	return b.String()
}

// CheckTimeout bounds Porcupine's search; past it the verdict is Unknown,
// which a test counts as a failure.
var CheckTimeout = 2 * time.Minute

// Observed is what a run left behind besides its history.
type Observed struct {
	Feed   []Event          // the whole tenant feed, in read order
	Ledger map[string]int64 // balance by account; nil skips the ledger check
	// Tokens maps token id to intent ID for every token the database holds,
	// so that the events of a token whose issue was never answered can be
	// told apart from events of no request at all. Nil: only answers name
	// tokens.
	Tokens map[string]string
}

// Check decides whether ops (a History's operations) is linearizable
// against Model, and checks what the run left (the feed, the ledger)
// against it. A failing check writes Porcupine's visualization of the
// failing intents to dir.
func Check(ops []porcupine.Operation, o Observed, dir string) Result {
	var r Result
	feed, ledger := o.Feed, o.Ledger
	r.Linearizable, r.Problems, r.Visualization = checkLinear(ops, dir)
	r.Problems = append(r.Problems, checkFeed(ops, feed, o.Tokens)...)
	if ledger != nil {
		r.Problems = append(r.Problems, checkLedger(ops, feed, ledger)...)
	}
	return r
}

func checkLinear(ops []porcupine.Operation, dir string) (porcupine.CheckResult, []string, string) {
	res := porcupine.CheckOperationsTimeout(Model, ops, CheckTimeout)
	if res == porcupine.Ok {
		return res, nil, ""
	}
	// Find the intents at fault, one by one, and report each.
	var problems []string
	var bad []porcupine.Operation
	for _, part := range Model.Partition(ops) {
		pres, info := porcupine.CheckOperationsVerbose(Model, part, CheckTimeout)
		if pres == porcupine.Ok {
			continue
		}
		bad = append(bad, part...)
		problems = append(problems, explain(part, info, pres))
	}
	var vis string
	if len(bad) > 0 && dir != "" {
		_, info := porcupine.CheckOperationsVerbose(Model, bad, CheckTimeout)
		vis = filepath.Join(dir, fmt.Sprintf("porcupine-%d.html", time.Now().UnixNano()))
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if err := porcupine.VisualizePath(Model, info, vis); err != nil {
				problems = append(problems, "writing the visualization: "+err.Error())
				vis = ""
			}
		}
	}
	return res, problems, vis
}

// explain is a readable account of one intent's history that no correct
// server could have produced: every request in start order, with the
// longest sequence the model accepts and the requests it could not place.
func explain(part []porcupine.Operation, info porcupine.LinearizationInfo, res porcupine.CheckResult) string {
	var b strings.Builder
	intent := part[0].Input.(Input).Intent
	fmt.Fprintf(&b, "intent %s: %s: no order of its %d requests is one a single correct server could have answered\n", intent, res, len(part))
	sorted := slices.Clone(part)
	slices.SortStableFunc(sorted, func(a, c porcupine.Operation) int { return cmp.Compare(a.Call, c.Call) })
	base := sorted[0].Call
	placed := map[int64]bool{}
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations() {
		for _, l := range p {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	key := func(op porcupine.Operation) int64 { return op.Call*31 + int64(op.ClientId) }
	for _, op := range longest {
		placed[key(op)] = true
	}
	b.WriteString("  requests (ms from the first request's start; * = outside the longest order the model accepts):\n")
	for _, op := range sorted {
		mark := " "
		if !placed[key(op)] {
			mark = "*"
		}
		end := "never answered"
		if op.Return != 1<<63-1 {
			end = fmt.Sprintf("%8.1f", float64(op.Return-base)/1e6)
		}
		fmt.Fprintf(&b, "  %s client %-3d %8.1f .. %s  %s\n", mark, op.ClientId, float64(op.Call-base)/1e6, end,
			describe(op.Input.(Input), op.Output.(Output)))
	}
	if len(longest) > 0 {
		b.WriteString("  longest accepted order:\n")
		for i, op := range longest {
			fmt.Fprintf(&b, "    %d. %s\n", i+1, describe(op.Input.(Input), op.Output.(Output)))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// transition is an event's change, the unit the feed check counts.
type transition struct{ from, to string }

// allowed are the changes DESIGN.md's state diagram has; purged ends any
// finished token.
var allowed = map[transition]bool{
	{"", "issued"}:         true,
	{"issued", "consumed"}: true, {"issued", "failed"}: true, {"issued", "pending"}: true,
	{"issued", "revoked"}: true, {"issued", "expired"}: true,
	{"pending", "consumed"}: true, {"pending", "failed"}: true, {"pending", "unknown"}: true, {"pending", "pending"}: true,
	{"unknown", "consumed"}: true, {"unknown", "issued"}: true, {"unknown", "failed"}: true,
	{"consumed", "purged"}: true, {"failed", "purged"}: true, {"revoked", "purged"}: true, {"expired", "purged"}: true,
}

// effect is the change a request asks for, if it is answered yes.
func effect(in Input) (transition, bool) {
	switch in.Kind {
	case KindIssue:
		return transition{"", "issued"}, in.Fingerprint == 0
	case KindSpend:
		if !in.PayloadOK {
			return transition{}, false
		}
		if in.Lease {
			return transition{"issued", "pending"}, true
		}
		return transition{"issued", "consumed"}, true
	case KindComplete, KindFail, KindUnknown:
		return transition{"pending", reportTarget(in.Kind)}, true
	case KindRevoke:
		return transition{"issued", "revoked"}, true
	case KindReconcile:
		return transition{"unknown", reconcileTarget(in.Outcome)}, true
	}
	return transition{}, false
}

// succeeded: the answer says the request's change was made by this request
// or, for a spend's replay, by an earlier one.
func succeeded(in Input, out Output) bool {
	if out.Unknown {
		return false
	}
	switch in.Kind {
	case KindIssue:
		return out.Status == 201 && !out.Replayed
	case KindSpend:
		if in.Lease {
			return out.Status == 202 && !out.Replayed
		}
		return out.Status == 200 && out.State == "consumed"
	case KindComplete, KindFail, KindUnknown, KindRevoke, KindReconcile:
		return out.Status == 200 && !out.Replayed
	}
	return false
}

// checkFeed: the feed serves each event once, in increasing positions;
// each token's events follow the state diagram from its issue, each change
// at most once; every change answered yes is there, in real-time order;
// and no change is there that no request could have made.
func checkFeed(ops []porcupine.Operation, feed []Event, tokens map[string]string) []string {
	problems, bad := checkFeedProblems(ops, feed, tokens)
	// The requests and events of each intent at fault, to read the
	// problems against.
	for _, intent := range slices.Sorted(maps.Keys(bad)) {
		var b strings.Builder
		fmt.Fprintf(&b, "feed: intent %s, its requests and events:\n", intent)
		var mine []porcupine.Operation
		for _, op := range ops {
			if op.Input.(Input).Intent == intent {
				mine = append(mine, op)
			}
		}
		slices.SortStableFunc(mine, func(a, c porcupine.Operation) int { return cmp.Compare(a.Call, c.Call) })
		if len(mine) > 0 {
			base := mine[0].Call
			for _, op := range mine {
				end := "never answered"
				if op.Return != 1<<63-1 {
					end = fmt.Sprintf("%8.1f", float64(op.Return-base)/1e6)
				}
				fmt.Fprintf(&b, "    client %-3d %8.1f .. %s  %s\n", op.ClientId, float64(op.Call-base)/1e6, end,
					describe(op.Input.(Input), op.Output.(Output)))
			}
		}
		for _, e := range feed {
			if tokens[e.TokenID] == intent || bad[intent][e.TokenID] {
				fmt.Fprintf(&b, "    event %s position %d token %s %s->%s generation %d\n", e.ID, e.Position, e.TokenID, e.From, e.To, e.Generation)
			}
		}
		problems = append(problems, strings.TrimRight(b.String(), "\n"))
	}
	return problems
}

func checkFeedProblems(ops []porcupine.Operation, feed []Event, tokens map[string]string) ([]string, map[string]map[string]bool) {
	var problems []string
	bad := map[string]map[string]bool{} // intent -> its token ids
	flag := func(intent, id string) {
		if bad[intent] == nil {
			bad[intent] = map[string]bool{}
		}
		if id != "" {
			bad[intent][id] = true
		}
	}
	seen := map[string]bool{}
	var last int64 = -1 << 63
	byToken := map[string][]Event{}
	for _, e := range feed {
		if seen[e.ID] {
			problems = append(problems, fmt.Sprintf("feed: event %s served twice", e.ID))
		}
		seen[e.ID] = true
		if e.Position <= last {
			problems = append(problems, fmt.Sprintf("feed: event %s at position %d after position %d", e.ID, e.Position, last))
		}
		last = e.Position
		byToken[e.TokenID] = append(byToken[e.TokenID], e)
	}

	intentOf := map[string]string{} // token id -> intent
	for id, intent := range tokens {
		intentOf[id] = intent
	}
	byIntent := map[string][]porcupine.Operation{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		byIntent[in.Intent] = append(byIntent[in.Intent], op)
		if in.Kind == KindIssue && out.ID != "" {
			intentOf[out.ID] = in.Intent
		}
	}

	tokenIDs := slices.Sorted(func(yield func(string) bool) {
		for id := range byToken {
			if !yield(id) {
				return
			}
		}
	})
	eventsOf := map[string]map[transition][]Event{} // intent -> change -> events
	for _, id := range tokenIDs {
		evs := byToken[id]
		intent, ok := intentOf[id]
		if !ok {
			problems = append(problems, fmt.Sprintf("feed: %d events for token %s, which no answer named", len(evs), id))
			continue
		}
		prev := ""
		changes := map[transition][]Event{}
		dup := map[string]bool{}
		for i, e := range evs {
			tr := transition{e.From, e.To}
			if i == 0 && e.From != "" {
				flag(intent, id)
				problems = append(problems, fmt.Sprintf("feed: intent %s token %s: first event %s is %s->%s, not the issue", intent, id, e.ID, e.From, e.To))
			}
			if i > 0 && e.From != prev {
				flag(intent, id)
				problems = append(problems, fmt.Sprintf("feed: intent %s token %s: event %s (%s->%s) follows one that left the token %s: an event is missing or out of order", intent, id, e.ID, e.From, e.To, prev))
			}
			if !allowed[tr] {
				flag(intent, id)
				problems = append(problems, fmt.Sprintf("feed: intent %s token %s: event %s is %s->%s, a change the state diagram does not have", intent, id, e.ID, e.From, e.To))
			}
			k := fmt.Sprintf("%s>%s@%d", e.From, e.To, e.Generation)
			if dup[k] {
				flag(intent, id)
				problems = append(problems, fmt.Sprintf("feed: intent %s token %s: change %s->%s generation %d appears twice (event %s): an effect applied twice", intent, id, e.From, e.To, e.Generation, e.ID))
			}
			dup[k] = true
			changes[tr] = append(changes[tr], e)
			prev = e.To
		}
		eventsOf[intent] = changes
	}

	for _, intent := range slices.Sorted(func(yield func(string) bool) {
		for k := range byIntent {
			if !yield(k) {
				return
			}
		}
	}) {
		intentOps := byIntent[intent]
		changes := eventsOf[intent]
		short := slices.ContainsFunc(intentOps, func(op porcupine.Operation) bool { return op.Input.(Input).ShortLease })
		// Each change answered yes is in the feed.
		type answered struct {
			op  porcupine.Operation
			pos int64
		}
		var yes []answered
		for _, op := range intentOps {
			in, out := op.Input.(Input), op.Output.(Output)
			if !succeeded(in, out) {
				continue
			}
			tr, _ := effect(in)
			evs := changes[tr]
			if in.Kind == KindSpend && in.Lease {
				evs = slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return e.Generation != out.Gen })
			}
			if in.Kind == KindComplete || in.Kind == KindFail || in.Kind == KindUnknown {
				evs = slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return e.Generation != in.Generation })
			}
			ordered := true
			if in.Kind == KindReconcile && tr.to == "issued" && len(evs) > 1 {
				// The token may have been put back more than once: this
				// answer's change is the one of its generation.
				if same := slices.DeleteFunc(slices.Clone(evs), func(e Event) bool { return e.Generation != out.Gen }); len(same) > 0 {
					evs = same
				} else {
					ordered = false
				}
			}
			if len(evs) == 0 {
				flag(intent, "")
				problems = append(problems, fmt.Sprintf("feed: intent %s: %s was answered yes, but no %s->%s event is in the feed: a lost event",
					intent, describe(in, out), tr.from, tr.to))
				continue
			}
			if ordered && !(in.Kind == KindSpend && out.Replayed) {
				yes = append(yes, answered{op, evs[len(evs)-1].Position})
			}
		}
		// In the order the answers came.
		for _, a := range yes {
			for _, b := range yes {
				if a.op.Return < b.op.Call && a.pos > b.pos {
					flag(intent, "")
					problems = append(problems, fmt.Sprintf("feed: intent %s: %s was answered before %s was sent, but its event comes later (position %d > %d)",
						intent, describe(a.op.Input.(Input), a.op.Output.(Output)), describe(b.op.Input.(Input), b.op.Output.(Output)), a.pos, b.pos))
				}
			}
		}
		// Every change in the feed was asked for by a request that was not
		// refused. A lapsed lease (a 1 s one) goes unknown by itself; the
		// hour-long ones never lapse during a run, so for them a
		// pending->unknown change must come from a report.
		for tr, evs := range changes {
			if tr.to == "expired" || tr.to == "purged" || tr == (transition{"pending", "pending"}) || tr == (transition{"pending", "unknown"}) && short {
				continue
			}
			could := false
			for _, op := range intentOps {
				in, out := op.Input.(Input), op.Output.(Output)
				if t, ok := effect(in); ok && t == tr && (out.Unknown || succeeded(in, out)) {
					could = true
				}
			}
			if !could {
				flag(intent, "")
				problems = append(problems, fmt.Sprintf("feed: intent %s: %d %s->%s event(s) (first %s), but every request that could make that change was refused: an effect that did not happen",
					intent, len(evs), tr.from, tr.to, evs[0].ID))
			}
		}
	}
	return problems, bad
}

// checkLedger: each atomic intent's account holds its amount exactly when
// the feed says its token was consumed by a spend, and nothing else moved.
func checkLedger(ops []porcupine.Operation, feed []Event, ledger map[string]int64) []string {
	consumed := map[string]bool{} // token id
	for _, e := range feed {
		if e.From == "issued" && e.To == "consumed" {
			consumed[e.TokenID] = true
		}
	}
	want := map[string]int64{}
	tokenOf := map[string]string{}
	amount := map[string]int64{}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Lease {
			continue
		}
		if in.Kind == KindIssue && out.ID != "" {
			tokenOf[in.Intent] = out.ID
		}
		if in.Kind == KindSpend && in.PayloadOK {
			amount[in.Intent] = in.Amount
		}
	}
	var problems []string
	var sumWant, sumHave int64
	for intent, id := range tokenOf {
		if consumed[id] {
			want[intent] = amount[intent]
		}
	}
	for acct, bal := range ledger {
		sumHave += bal
		if bal != want[acct] {
			problems = append(problems, fmt.Sprintf("ledger: account %s holds %d, want %d (its token consumed: %v)", acct, bal, want[acct], consumed[tokenOf[acct]]))
		}
	}
	for acct, w := range want {
		sumWant += w
		if _, ok := ledger[acct]; !ok && w != 0 {
			problems = append(problems, fmt.Sprintf("ledger: account %s has no row, want %d", acct, w))
		}
	}
	if sumHave != sumWant {
		problems = append(problems, fmt.Sprintf("ledger: balances add up to %d, the consumed credits to %d", sumHave, sumWant))
	}
	return problems
}
