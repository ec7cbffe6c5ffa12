package robust

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// hb builds histories by hand: times in ms, wall clock = monotonic.
type hb struct{ ops []porcupine.Operation }

func (h *hb) add(client int, call, ret int64, in Input, out Output) *hb {
	in.CallWall, in.ReturnWall = call*1e6, ret*1e6
	if out.Unknown {
		ret = 1<<63 - 1
	} else {
		ret *= 1e6
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call * 1e6, Return: ret})
	return h
}

const body1 = `{"token_id":"tok_a","state":"consumed","result":{"account":"i1","balance":5}}`

var (
	issueIn  = Input{Kind: KindIssue, Intent: "i1"}
	issueOut = Output{Status: 201, ID: "tok_a", Secret: "s_a", State: "issued"}
	replay   = Output{Status: 201, Replayed: true, ID: "tok_a", Secret: "s_a", State: "issued"}
	spendIn  = Input{Kind: KindSpend, Intent: "i1", PayloadOK: true, Amount: 5}
	spendOut = Output{Status: 200, State: "consumed", Body: body1}
	getIn    = Input{Kind: KindGet, Intent: "i1"}

	evIssued   = Event{ID: "e1", Position: 1, TokenID: "tok_a", To: "issued"}
	evConsumed = Event{ID: "e2", Position: 2, TokenID: "tok_a", From: "issued", To: "consumed"}

	// A lease of 1 s granted at 20 ms, ending at 1020 ms, whose holder
	// never reports: the sweeper lapses it to unknown.
	shortIssueIn = Input{Kind: KindIssue, Intent: "i1", Lease: true, ShortLease: true}
	shortSpendIn = Input{Kind: KindSpend, Intent: "i1", Lease: true, ShortLease: true, PayloadOK: true}
	shortLeased  = Output{Status: 202, State: "pending", Gen: 1, LeaseEnd: 1020 * 1e6}
	shortGetIn   = Input{Kind: KindGet, Intent: "i1", Lease: true, ShortLease: true}
	evPending    = Event{ID: "e2", Position: 2, TokenID: "tok_a", From: "issued", To: "pending", Generation: 1}
	evLapsed     = Event{ID: "e3", Position: 3, TokenID: "tok_a", From: "pending", To: "unknown", Generation: 1}
)

// lapsed is a lease granted at 20 ms, read pending, and read again at 2 s:
// unknown, with the lapse in the feed and no report. short says whether
// the lease is the 1 s one, kind whether the reads are GETs or lists.
func lapsed(short bool, kind Kind) *hb {
	issue, spend, get := shortIssueIn, shortSpendIn, shortGetIn
	issue.ShortLease, spend.ShortLease, get.ShortLease = short, short, short
	get.Kind = kind
	return (&hb{}).add(0, 0, 10, issue, issueOut).add(0, 20, 30, spend, shortLeased).
		add(1, 40, 50, get, Output{Status: 200, ID: "tok_a", State: "pending", Gen: 1}).
		add(1, 2000, 2010, get, Output{Status: 200, ID: "tok_a", State: "unknown", Gen: 1})
}

// A correct history passes, answers that never arrived included.
func TestCheckAcceptsCorrectHistories(t *testing.T) {
	cases := map[string]struct {
		h      *hb
		feed   []Event
		ledger map[string]int64
	}{
		"spend then read": {
			(&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut).
				add(1, 25, 35, spendIn, Output{Status: 200, Replayed: true, State: "consumed", Body: body1}).
				add(1, 40, 50, getIn, Output{Status: 200, ID: "tok_a", State: "consumed"}).
				add(2, 45, 55, issueIn, replay),
			[]Event{evIssued, evConsumed}, map[string]int64{"i1": 5},
		},
		"a read concurrent with the spend may see either state": {
			(&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut).
				add(1, 25, 35, getIn, Output{Status: 200, ID: "tok_a", State: "issued"}),
			[]Event{evIssued, evConsumed}, map[string]int64{"i1": 5},
		},
		"an unanswered spend that happened": {
			(&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, Output{Unknown: true, Err: "connection reset"}).
				add(1, 40, 50, getIn, Output{Status: 200, ID: "tok_a", State: "consumed"}),
			[]Event{evIssued, evConsumed}, map[string]int64{"i1": 5},
		},
		"a 1 s lease lapses to unknown with no report": {
			lapsed(true, KindGet), []Event{evIssued, evPending, evLapsed}, nil,
		},
		"a list sees a lapsed lease": {
			lapsed(true, KindList), []Event{evIssued, evPending, evLapsed}, nil,
		},
		"an unanswered spend that did not happen": {
			(&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, Output{Unknown: true, Err: "timeout"}).
				add(1, 40, 50, getIn, Output{Status: 200, ID: "tok_a", State: "issued"}),
			[]Event{evIssued}, map[string]int64{},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(c.h.ops, Observed{Feed: c.feed, Ledger: c.ledger}, artifactDir(t))
			if !r.OK() {
				t.Errorf("a correct history was rejected:\n%s", r.Report())
			}
		})
	}
}

// Each broken behaviour is rejected with a report naming the requests
// involved, and Porcupine's visualization is written when the history
// itself is not linearizable.
func TestCheckRejectsBrokenHistories(t *testing.T) {
	cases := map[string]struct {
		h      *hb
		feed   []Event
		ledger map[string]int64
		linear bool     // the history alone is linearizable (the fault is in the feed or ledger)
		want   []string // in the report
	}{
		"stale read: GET answers issued after a spend was answered 200": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut).
				add(1, 40, 50, getIn, Output{Status: 200, ID: "tok_a", State: "issued"}),
			feed: []Event{evIssued, evConsumed}, ledger: map[string]int64{"i1": 5},
			want: []string{"intent i1: Illegal", "get(i1) -> 200 id=tok_a state=issued", "spend(i1, atomic, payload ok) -> 200"},
		},
		"spend applied twice": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut).
				add(1, 40, 50, spendIn, Output{Status: 200, State: "consumed",
					Body: `{"token_id":"tok_a","state":"consumed","result":{"account":"i1","balance":10}}`}),
			feed:   []Event{evIssued, evConsumed, {ID: "e3", Position: 3, TokenID: "tok_a", From: "issued", To: "consumed"}},
			ledger: map[string]int64{"i1": 10},
			want:   []string{"intent i1: Illegal", "balance\":10", "appears twice", "ledger: account i1 holds 10, want 5"},
		},
		"issue replay returns a new token": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).
				add(1, 20, 30, issueIn, Output{Status: 201, Replayed: true, ID: "tok_b", Secret: "s_b", State: "issued"}),
			feed: []Event{evIssued},
			want: []string{"intent i1: Illegal", "issue(i1, fingerprint 0) -> 201 replayed id=tok_b"},
		},
		"lost feed event": {
			h:      (&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut),
			feed:   []Event{evIssued},
			ledger: map[string]int64{"i1": 5},
			linear: true,
			want:   []string{"spend(i1, atomic, payload ok) -> 200", "no issued->consumed event is in the feed: a lost event", "ledger: account i1 holds 5, want 0"},
		},
		"an hour-long lease lapses with no report": {
			h:    lapsed(false, KindGet),
			feed: []Event{evIssued, evPending, evLapsed},
			want: []string{"intent i1: Illegal", "get(i1) -> 200 id=tok_a state=unknown gen=1", "every request that could make that change was refused"},
		},
		"a 1 s lease read unknown before it ends": {
			h: (&hb{}).add(0, 0, 10, shortIssueIn, issueOut).add(0, 20, 30, shortSpendIn, shortLeased).
				add(1, 500, 510, shortGetIn, Output{Status: 200, ID: "tok_a", State: "unknown", Gen: 1}),
			feed: []Event{evIssued, evPending, evLapsed},
			want: []string{"intent i1: Illegal", "get(i1) -> 200 id=tok_a state=unknown gen=1"},
		},
		"stale list: a list answers issued after a spend was answered 200": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).add(0, 20, 30, spendIn, spendOut).
				add(1, 40, 50, Input{Kind: KindList, Intent: "i1"}, Output{Status: 200, ID: "tok_a", State: "issued"}),
			feed: []Event{evIssued, evConsumed}, ledger: map[string]int64{"i1": 5},
			want: []string{"intent i1: Illegal", `list(i1, state filter "") -> 200 id=tok_a state=issued`},
		},
		"a list filtered by state answers another": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).
				add(1, 40, 50, Input{Kind: KindList, Intent: "i1", Filter: "consumed"}, Output{Status: 200, ID: "tok_a", State: "issued"}),
			feed: []Event{evIssued},
			want: []string{"intent i1: Illegal", `list(i1, state filter "consumed") -> 200 id=tok_a state=issued`},
		},
		"event for a refused spend": {
			h: (&hb{}).add(0, 0, 10, issueIn, issueOut).
				add(0, 20, 30, Input{Kind: KindSpend, Intent: "i1", PayloadOK: true}, Output{Status: 409, Code: "in_progress"}),
			feed:   []Event{evIssued, evConsumed},
			linear: true,
			want:   []string{"every request that could make that change was refused"},
		},
	}
	dir := artifactDir(t)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := Check(c.h.ops, Observed{Feed: c.feed, Ledger: c.ledger}, dir)
			if r.OK() {
				t.Fatalf("a broken history was accepted")
			}
			rep := r.Report()
			t.Logf("the checker's report:\n%s", rep)
			for _, w := range c.want {
				if !strings.Contains(rep, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			if c.linear != (r.Linearizable == porcupine.Ok) {
				t.Errorf("linearizability verdict %s, want linearizable=%v", r.Linearizable, c.linear)
			}
			if !c.linear {
				if r.Visualization == "" {
					t.Fatalf("no visualization written")
				}
				if fi, err := os.Stat(r.Visualization); err != nil || fi.Size() == 0 {
					t.Errorf("visualization %s: %v", r.Visualization, err)
				}
			}
		})
	}
}
