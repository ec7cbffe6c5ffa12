package inspect_test

import (
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// env is a database with an issuer and a spender on it.
type env struct {
	pool    *pgxpool.Pool
	issuer  *intent.Issuer
	spender *consume.Spender
}

func newEnv(t *testing.T) *env {
	t.Helper()
	k := ledgertest.New(t, tokentest.Options{})
	return &env{pool: k.Pool, issuer: k.Issuer, spender: k.Spender}
}

func (e *env) issue(t *testing.T, tenant, op, subject, payload string) intent.Issued {
	t.Helper()
	req := intent.Request{Tenant: tenant, Operation: op, IntentID: "intent-" + token.NewID(), Subject: subject, TTLSeconds: 600, Actor: "key_test"}
	if payload != "" {
		req.Payload = []byte(payload)
	}
	out, err := e.issuer.Issue(t.Context(), e.pool, req)
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return out
}

func TestGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	iss := e.issue(t, "acme", ledger.Credit, "user-1", `{"account":"a","amount":5}`)

	got, err := inspect.Get(ctx, e.pool, "acme", iss.Token.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := iss.Token
	if got.ID != want.ID || got.Tenant != "acme" || got.Operation != ledger.Credit || got.Subject != "user-1" ||
		got.IntentID != want.IntentID || got.State != token.Issued || got.Generation != 0 ||
		string(got.PayloadDigest) != string(want.PayloadDigest) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!got.CreatedAt.Equal(want.CreatedAt) || got.ResultStatus != 0 || got.ResultBody != nil || got.FinishedAt != nil {
		t.Errorf("Get = %+v\nwant %+v", got, want)
	}

	if _, err := e.spender.Spend(ctx, e.pool, consume.Request{Tenant: "acme", Secret: iss.Secret, Operation: ledger.Credit, Subject: "user-1", Payload: []byte(`{"account":"a","amount":5}`)}); err != nil {
		t.Fatalf("Spend: %v", err)
	}
	got, err = inspect.Get(ctx, e.pool, "acme", iss.Token.ID)
	if err != nil {
		t.Fatalf("Get after spend: %v", err)
	}
	if got.State != token.Consumed || got.ResultStatus != 200 || got.FinishedAt == nil ||
		string(got.ResultBody) != fmt.Sprintf(`{"token_id":"%s","state":"consumed","result":{"account":"a","balance":5}}`, iss.Token.ID) {
		t.Errorf("Get after spend = state %s, status %d, body %s, finished %v", got.State, got.ResultStatus, got.ResultBody, got.FinishedAt)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	iss := e.issue(t, "acme", ledger.Credit, "user-1", "")
	tests := []struct{ name, tenant, id string }{
		{"another tenant's", "globex", iss.Token.ID},
		{"never issued", "acme", token.NewID()},
		{"malformed", "acme", "tok_x"},
		{"empty", "acme", ""},
		{"sql-looking", "acme", "tok_' OR '1'='1"},
	}
	for _, tt := range tests {
		if r, err := inspect.Get(t.Context(), e.pool, tt.tenant, tt.id); !errors.Is(err, token.ErrNotFound) {
			t.Errorf("%s: Get = %+v, %v; want token.ErrNotFound", tt.name, r, err)
		}
		if ev, err := inspect.Events(t.Context(), e.pool, tt.tenant, tt.id); !errors.Is(err, token.ErrNotFound) {
			t.Errorf("%s: Events = %+v, %v; want token.ErrNotFound", tt.name, ev, err)
		}
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if _, err := operation.Put(ctx, e.pool, "acme", operation.Policy{Name: "pay.card", Mode: operation.Lease}, nil); err != nil {
		t.Fatal(err)
	}
	iss := e.issue(t, "acme", "pay.card", "user-1", "")
	resp, err := e.spender.Spend(ctx, e.pool, consume.Request{Tenant: "acme", Secret: iss.Secret, Operation: "pay.card", Subject: "user-1", Actor: "key_spender"})
	if err != nil {
		t.Fatalf("Spend: %v", err)
	}
	if _, err := consume.Finish(ctx, e.pool, token.Complete, consume.Report{Tenant: "acme", TokenID: iss.Token.ID, Generation: resp.Lease.Generation, Actor: "key_holder"}); err != nil {
		t.Fatalf("Finish: %v", err)
	}

	events, err := inspect.Events(ctx, e.pool, "acme", iss.Token.ID)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	type step struct {
		actor, kind string
		from, to    token.State
		generation  int64
		detail      bool
	}
	want := []step{
		{"key_test", "issued", "", token.Issued, 0, false},
		{"key_spender", "lease", token.Issued, token.Pending, 1, true},
		{"key_holder", "complete", token.Pending, token.Consumed, 1, false},
	}
	var got []step
	for i, ev := range events {
		got = append(got, step{ev.Actor, ev.Kind, ev.From, ev.To, ev.Generation, ev.Detail != nil})
		if i > 0 && (ev.Seq <= events[i-1].Seq || ev.At.Before(events[i-1].At)) {
			t.Errorf("event %d (seq %d at %v) is not after event %d (seq %d at %v)", i, ev.Seq, ev.At, i-1, events[i-1].Seq, events[i-1].At)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events =\n%+v\nwant\n%+v", got, want)
	}
	if d := string(events[1].Detail); !strings.Contains(d, `"operation_id": "`+resp.Lease.OperationID+`"`) {
		t.Errorf("lease event detail = %s, want the operation id %s", d, resp.Lease.OperationID)
	}
}

func TestListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	var want []string
	for i := range 7 {
		want = append(want, e.issue(t, "acme", ledger.Credit, fmt.Sprintf("user-%d", i), "").Token.ID)
		e.issue(t, "globex", ledger.Credit, "user-1", "") // must never show up
	}
	slices.Sort(want)
	slices.Reverse(want) // newest first

	for _, limit := range []int{1, 3, 7, 10} {
		var got []string
		cursor, pages := "", 0
		for {
			items, next, err := inspect.List(ctx, e.pool, "acme", inspect.Filter{Limit: limit, Cursor: cursor})
			if err != nil {
				t.Fatalf("limit %d: List: %v", limit, err)
			}
			if len(items) == 0 {
				t.Fatalf("limit %d: page %d is empty", limit, pages)
			}
			pages++
			for _, r := range items {
				got = append(got, r.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: paged ids =\n%v\nwant\n%v", limit, got, want)
		}
		if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
			t.Errorf("limit %d: %d pages, want %d", limit, pages, wantPages)
		}
	}

	items, next, err := inspect.List(ctx, e.pool, "acme", inspect.Filter{})
	if err != nil || len(items) != len(want) || next != "" {
		t.Errorf("List(default limit) = %d items, next %q, %v; want %d, no next", len(items), next, err, len(want))
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	debit := e.issue(t, "acme", ledger.Debit, "alice", `{"account":"a","amount":1}`)
	credit := e.issue(t, "acme", ledger.Credit, "bob", `{"account":"a","amount":1}`)
	// Spending credit makes it consumed and gives a created_at to split on.
	if _, err := e.spender.Spend(ctx, e.pool, consume.Request{Tenant: "acme", Secret: credit.Secret, Operation: ledger.Credit, Subject: "bob", Payload: []byte(`{"account":"a","amount":1}`)}); err != nil {
		t.Fatal(err)
	}
	later := e.issue(t, "acme", ledger.Credit, "alice", "")
	// created_at is the issuing transaction's clock; make the split strict.
	split := later.Token.CreatedAt.Add(time.Hour)
	if _, err := e.pool.Exec(ctx, `UPDATE tokens SET created_at = $3 WHERE tenant_id = $1 AND id = $2`, "acme", later.Token.ID, split); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		filter inspect.Filter
		want   []string
	}{
		{"all", inspect.Filter{}, []string{later.Token.ID, credit.Token.ID, debit.Token.ID}},
		{"state issued", inspect.Filter{State: token.Issued}, []string{later.Token.ID, debit.Token.ID}},
		{"state consumed", inspect.Filter{State: token.Consumed}, []string{credit.Token.ID}},
		{"state pending", inspect.Filter{State: token.Pending}, nil},
		{"operation", inspect.Filter{Operation: ledger.Debit}, []string{debit.Token.ID}},
		{"subject", inspect.Filter{Subject: "alice"}, []string{later.Token.ID, debit.Token.ID}},
		{"subject and operation", inspect.Filter{Subject: "alice", Operation: ledger.Credit}, []string{later.Token.ID}},
		{"created after (inclusive)", inspect.Filter{CreatedAfter: split}, []string{later.Token.ID}},
		{"created before (exclusive)", inspect.Filter{CreatedBefore: split}, []string{credit.Token.ID, debit.Token.ID}},
		{"empty window", inspect.Filter{CreatedAfter: split, CreatedBefore: split}, nil},
		{"no match", inspect.Filter{Subject: "carol"}, nil},
		{"subject is not a pattern", inspect.Filter{Subject: "%"}, nil},
		{"search by subject", inspect.Filter{Search: "bob"}, []string{credit.Token.ID}},
		{"search by intent", inspect.Filter{Search: debit.Token.IntentID}, []string{debit.Token.ID}},
		{"search and state", inspect.Filter{Search: "alice", State: token.Issued}, []string{later.Token.ID, debit.Token.ID}},
		{"search is not a pattern", inspect.Filter{Search: "intent-%"}, nil},
	}
	for _, tt := range tests {
		items, next, err := inspect.List(ctx, e.pool, "acme", tt.filter)
		if err != nil {
			t.Errorf("%s: List: %v", tt.name, err)
			continue
		}
		var got []string
		for _, r := range items {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, tt.want) || next != "" {
			t.Errorf("%s: List = %v, next %q; want %v", tt.name, got, next, tt.want)
		}
	}
}

func TestListInvalidFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name   string
		filter inspect.Filter
	}{
		{"unknown state", inspect.Filter{State: "purged"}},
		{"negative limit", inspect.Filter{Limit: -1}},
		{"limit over max", inspect.Filter{Limit: inspect.MaxLimit + 1}},
		{"cursor not base64", inspect.Filter{Cursor: "***"}},
		{"cursor not an id", inspect.Filter{Cursor: "dG9rX3g"}}, // base64url of "tok_x"
		{"raw id as cursor", inspect.Filter{Cursor: token.NewID()}},
		{"NUL in subject", inspect.Filter{Subject: "user\x00"}},
		{"NUL in search", inspect.Filter{Search: "user\x00"}},
		{"operation not UTF-8", inspect.Filter{Operation: "pay\xff"}},
	}
	for _, tt := range tests {
		if items, _, err := inspect.List(t.Context(), e.pool, "acme", tt.filter); !errors.Is(err, inspect.ErrInvalidFilter) {
			t.Errorf("%s: List = %d items, %v; want ErrInvalidFilter", tt.name, len(items), err)
		}
	}
	if _, _, err := inspect.List(t.Context(), e.pool, "acme", inspect.Filter{Limit: inspect.MaxLimit}); err != nil {
		t.Errorf("List(limit %d) = %v", inspect.MaxLimit, err)
	}
}
