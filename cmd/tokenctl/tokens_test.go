package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/token"
)

// page is the answer of list --json.
type page struct {
	Items      []client.TokenDetail `json:"items"`
	NextCursor *string              `json:"next_cursor"`
}

// newestFirst orders token ids the way lists do: ids sort by creation time
// to the millisecond, and tokens made in one millisecond by their random part.
func newestFirst(ids ...string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func ids(items []client.TokenDetail) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// lines splits output into its lines.
func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func TestInspect(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := f.credit("order-1", "alice", true)

	var got client.TokenDetail
	r := f.okJSON(&got, "inspect", tok.ID)
	var kinds []string
	for _, e := range got.Events {
		kinds = append(kinds, e.Kind)
	}
	if got.ID != tok.ID || got.Tenant != "acme" || got.IntentID != "order-1" || got.Subject != "alice" || got.State != "consumed" ||
		got.ResultStatus == nil || *got.ResultStatus != http.StatusOK || got.PayloadDigest == nil ||
		!slices.Equal(kinds, []string{"issued", "spend"}) || strings.Contains(r.stdout, tok.Token) {
		t.Errorf("inspect --json = %s", r.stdout)
	}

	r = f.ok("inspect", tok.ID)
	for _, re := range []string{
		`(?m)^id +` + tok.ID + `$`,
		`(?m)^state +consumed$`,
		`(?m)^operation_id +-$`,
		`(?m)^result_status +200$`,
		`(?m)^SEQ +AT +ACTOR +KIND +FROM +TO +GENERATION +DETAIL$`,
		`(?m)^\d+ +\S+ +key_\S+ +spend +issued +consumed +0 +-$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("inspect lacks %s:\n%s", re, r.stdout)
		}
	}
	f.fails(exitNotFound, "token_not_found", "inspect", token.NewID())
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// Seven tokens, alice's and bob's by turns; alice's first one spent.
	var all, alice []string
	var consumed string
	for i := range 7 {
		subject := []string{"alice", "bob"}[i%2]
		id := f.credit(fmt.Sprint("i-", i), subject, i == 0).ID
		all = append(all, id)
		switch {
		case i == 0:
			consumed = id
		case subject == "alice":
			alice = append(alice, id)
		}
	}
	want := newestFirst(all...)
	globex := proctest.CreateKey(t, f.dbURL, "globex", "client")
	if status, b := f.call(globex, http.MethodPost, "/v1/tokens", `{"operation":"ledger.credit","subject":"alice","ttl_seconds":60}`, "Idempotency-Key", "i-0"); status != http.StatusCreated {
		t.Fatalf("globex issue: %d %s", status, b)
	}

	// --all follows every cursor: each token exactly once, and no cursor left.
	var every page
	f.okJSON(&every, "list", "--all", "--limit", "3")
	if !slices.Equal(ids(every.Items), want) || every.NextCursor != nil {
		t.Errorf("list --all = %v (next %v)\nwant %v", ids(every.Items), every.NextCursor, want)
	}

	// Without it, one page and the cursor of the next, which --cursor takes.
	var first, second page
	f.okJSON(&first, "list", "--limit", "3")
	if !slices.Equal(ids(first.Items), want[:3]) || first.NextCursor == nil {
		t.Fatalf("list --limit 3 = %v (next %v), want %v and a cursor", ids(first.Items), first.NextCursor, want[:3])
	}
	f.okJSON(&second, "list", "--limit", "3", "--cursor", *first.NextCursor)
	if !slices.Equal(ids(second.Items), want[3:6]) {
		t.Errorf("second page = %v, want %v", ids(second.Items), want[3:6])
	}

	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--state", "consumed"}, []string{consumed}},
		{[]string{"--state", "issued", "--subject", "alice"}, newestFirst(alice...)},
		{[]string{"--operation", "ledger.debit"}, nil},
	}
	for _, tt := range tests {
		var p page
		f.okJSON(&p, append([]string{"list"}, tt.args...)...)
		if !slices.Equal(ids(p.Items), tt.want) {
			t.Errorf("list %v = %v, want %v", tt.args, ids(p.Items), tt.want)
		}
	}

	// A table: a header and a row per token, and a note on stderr when
	// more pages follow.
	r := f.ok("list", "--limit", "3")
	if l := lines(r.stdout); len(l) != 4 || !strings.HasPrefix(l[0], "ID ") || !strings.HasPrefix(l[1], want[0]+" ") ||
		!strings.Contains(r.stderr, "--cursor "+*first.NextCursor) {
		t.Errorf("list --limit 3: %v", r)
	}
	r = f.ok("list", "--all", "--limit", "3")
	if l := lines(r.stdout); len(l) != 8 || r.stderr != "" {
		t.Errorf("list --all: %v", r)
	}
	f.fails(exitError, "invalid_request", "list", "--state", "gone")
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := f.credit("i-1", "alice", false)

	// A reason is required, and nothing happens without one.
	f.fails(exitUsage, "--reason is required", "revoke", tok.ID)
	if s := f.state(tok.ID); s != "issued" {
		t.Fatalf("after a refused revoke the token is %s", s)
	}

	var got client.TokenDetail
	f.okJSON(&got, "revoke", tok.ID, "--reason", "fraud report #12")
	if got.ID != tok.ID || got.State != "revoked" || got.FinishedAt == nil {
		t.Errorf("revoke --json = %+v", got)
	}
	var detail client.TokenDetail
	f.okJSON(&detail, "inspect", tok.ID)
	if e := detail.Events[len(detail.Events)-1]; e.Kind != "revoke" || !strings.Contains(string(e.Detail), "fraud report #12") {
		t.Errorf("revoke event = %+v, want the reason", e)
	}
	if status, b := f.spend(tok, "ledger.credit"); status != http.StatusGone {
		t.Errorf("spend of a revoked token = %d %s, want 410", status, b)
	}

	f.fails(exitConflict, "invalid_state", "revoke", tok.ID, "--reason", "again")
	f.fails(exitNotFound, "token_not_found", "revoke", token.NewID(), "--reason", "x")

	// Flags before the operand, and a table.
	other := f.credit("i-2", "alice", false)
	r := f.ok("revoke", "--reason", "duplicate", other.ID)
	if !regexp.MustCompile(`(?m)^state +revoked$`).MatchString(r.stdout) || f.state(other.ID) != "revoked" {
		t.Errorf("revoke: %v", r)
	}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.declareLease()

	tests := []struct {
		name   string
		args   []string
		state  string
		status int    // stored and replayed; 0 for none
		replay string // what the next spend gets, %s the token id; "" for a new lease
	}{
		{"succeeded", []string{"--outcome", "succeeded", "--status", "201", "--result", `{"capture":"cap_1"}`}, "consumed", 201,
			`{"token_id":"%s","state":"consumed","result":{"capture":"cap_1"}}`},
		{"failed", []string{"--outcome", "failed", "--result", `{"reason":"declined"}`}, "failed", 422,
			`{"token_id":"%s","state":"failed","error":{"reason":"declined"}}`},
		{"not executed", []string{"--outcome", "not_executed"}, "issued", 0, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := f.unknown(fmt.Sprint("pay-", i))
			var got client.TokenDetail
			f.okJSON(&got, append([]string{"reconcile", tok.ID}, tt.args...)...)
			if string(got.State) != tt.state || (tt.status == 0) != (got.ResultStatus == nil) || got.ResultStatus != nil && *got.ResultStatus != tt.status {
				t.Errorf("reconcile = %+v, want %s with status %d", got, tt.state, tt.status)
			}
			status, body := f.spend(tok, "pay.card")
			if tt.replay != "" {
				if want := fmt.Sprintf(tt.replay, tok.ID); status != tt.status || string(body) != want {
					t.Errorf("spend after reconcile = %d %s, want %d %s", status, body, tt.status, want)
				}
				return
			}
			var lease struct{ Generation int64 }
			if err := json.Unmarshal(body, &lease); err != nil || status != http.StatusAccepted || lease.Generation <= got.Generation {
				t.Errorf("spend after not_executed = %d %s, want a new lease past generation %d", status, body, got.Generation)
			}
		})
	}

	tok := f.unknown("pay-refused")
	f.fails(exitUsage, "--outcome is required", "reconcile", tok.ID)
	f.fails(exitUsage, "--result is not valid JSON", "reconcile", tok.ID, "--outcome", "succeeded", "--result", `{"capture":`)
	f.fails(exitError, "invalid_request", "reconcile", tok.ID, "--outcome", "maybe")
	f.fails(exitError, "invalid_request", "reconcile", tok.ID, "--outcome", "not_executed", "--status", "200")
	if s := f.state(tok.ID); s != "unknown" {
		t.Errorf("after refused reconciles the token is %s, want unknown", s)
	}
	f.fails(exitConflict, "invalid_state", "reconcile", f.credit("i-1", "alice", false).ID, "--outcome", "succeeded")
	f.fails(exitNotFound, "token_not_found", "reconcile", token.NewID(), "--outcome", "succeeded")

	r := f.ok("reconcile", tok.ID, "--outcome", "succeeded")
	if !regexp.MustCompile(`(?m)^state +consumed$`).MatchString(r.stdout) {
		t.Errorf("reconcile: %v", r)
	}
}
