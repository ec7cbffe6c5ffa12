package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/token"
)

// adminToken is GET /v1/admin/tokens/{id}'s answer; list items are the same
// without events.
type adminToken struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	Operation      string          `json:"operation"`
	Subject        string          `json:"subject"`
	IntentID       string          `json:"intent_id"`
	State          string          `json:"state"`
	Generation     int64           `json:"generation"`
	OperationID    *string         `json:"operation_id"`
	PayloadDigest  *string         `json:"payload_digest"`
	CreatedAt      string          `json:"created_at"`
	ExpiresAt      string          `json:"expires_at"`
	RetainUntil    string          `json:"retain_until"`
	LeaseExpiresAt *string         `json:"lease_expires_at"`
	FinishedAt     *string         `json:"finished_at"`
	ResultStatus   *int            `json:"result_status"`
	ResultBody     json.RawMessage `json:"result_body"`
	Events         []adminEvent    `json:"events"`
}

type adminEvent struct {
	Seq        int64           `json:"seq"`
	At         string          `json:"at"`
	Actor      string          `json:"actor"`
	Kind       string          `json:"kind"`
	From       *string         `json:"from_state"`
	To         string          `json:"to_state"`
	Generation int64           `json:"generation"`
	Detail     json.RawMessage `json:"detail"`
}

type tokenPage struct {
	Items      []adminToken `json:"items"`
	NextCursor *string      `json:"next_cursor"`
}

// inspect GETs a token as operator key and fails the test unless it gets 200.
func (a *api) inspect(key, id string) adminToken {
	a.t.Helper()
	res := a.get(key, "/v1/admin/tokens/"+id)
	if res.status != http.StatusOK {
		a.t.Fatalf("inspect %s: %d %s", id, res.status, res.body)
	}
	var v adminToken
	mustUnmarshal(a.t, res.body, &v)
	return v
}

// declareLease declares pay.card, a lease operation whose lapsed leases wait
// for an operator, for tenant.
func (a *api) declareLease(tenant string) {
	a.t.Helper()
	res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.card", key: a.key(tenant, apikey.Operator), body: `{"mode":"lease","lease_seconds":600}`})
	if res.status != http.StatusOK {
		a.t.Fatalf("declare pay.card: %d %s", res.status, res.body)
	}
}

// leased issues a pay.card token with key and spends it: it is pending under
// the returned generation. pay.card must be declared.
func (a *api) leased(key, intentID string) (issued, int64) {
	a.t.Helper()
	tok := a.issue(key, intentID, `{"operation":"pay.card","subject":"user-1","ttl_seconds":300}`)
	res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, tok.Token))
	var lease struct{ Generation int64 }
	if res.status != http.StatusAccepted || jsonLoose(res.body, &lease) != nil {
		a.t.Fatalf("lease spend: %d %s", res.status, res.body)
	}
	return tok, lease.Generation
}

// unknown issues a pay.card token with key whose outcome its holder reported
// as unknown, under the returned generation.
func (a *api) unknown(key, intentID string) (issued, int64) {
	a.t.Helper()
	tok, gen := a.leased(key, intentID)
	if res := a.post(key, "/v1/tokens/"+tok.ID+"/unknown", fmt.Sprintf(`{"generation":%d}`, gen)); res.status != http.StatusOK {
		a.t.Fatalf("report unknown: %d %s", res.status, res.body)
	}
	return tok, gen
}

func (a *api) exec(sql string, args ...any) int64 {
	a.t.Helper()
	tag, err := a.pool.Exec(a.t.Context(), sql, args...)
	if err != nil {
		a.t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// exists reports whether the token's row is still there.
func (a *api) exists(id string) bool {
	a.t.Helper()
	var n int
	if err := a.pool.QueryRow(a.t.Context(), `SELECT count(*) FROM tokens WHERE id = $1`, id).Scan(&n); err != nil {
		a.t.Fatal(err)
	}
	return n == 1
}

// newestFirst orders token ids the way lists do. Ids sort by creation time
// to the millisecond, so tokens made in one millisecond keep no order of
// making: the order to expect is the ids'.
func newestFirst(ids ...string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func TestAdminInspect(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	tok := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	spent := a.post(key, "/v1/tokens/consume", spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":5}`))
	if spent.status != http.StatusOK {
		t.Fatalf("consume: %d %s", spent.status, spent.body)
	}

	res := a.get(op, "/v1/admin/tokens/"+tok.ID)
	if res.status != http.StatusOK || bytes.Contains(res.body, []byte(tok.Token)) {
		t.Fatalf("inspect = %d %s; want 200 without the secret", res.status, res.body)
	}
	var got adminToken
	mustUnmarshal(t, res.body, &got)
	if got.ID != tok.ID || got.Tenant != "acme" || got.Operation != "ledger.credit" || got.Subject != "user-1" ||
		got.IntentID != "order-1" || got.State != "consumed" || got.Generation != 0 || got.OperationID != nil ||
		got.PayloadDigest == nil || *got.PayloadDigest != *tok.PayloadDigest || got.ExpiresAt != tok.ExpiresAt ||
		got.LeaseExpiresAt != nil || got.ResultStatus == nil || *got.ResultStatus != http.StatusOK ||
		!bytes.Equal(got.ResultBody, spent.body) {
		t.Errorf("inspect = %s\nissued %s, spent %s", res.body, tok.raw.body, spent.body)
	}
	for name, ts := range map[string]*string{"created_at": &got.CreatedAt, "retain_until": &got.RetainUntil, "finished_at": got.FinishedAt} {
		if ts == nil || !timeRE.MatchString(*ts) {
			t.Errorf("%s = %v, want a timestamp", name, ts)
		}
	}

	type step struct{ actor, kind, from, to string }
	var steps []step
	for i, e := range got.Events {
		from := ""
		if e.From != nil {
			from = *e.From
		}
		steps = append(steps, step{e.Actor, e.Kind, from, e.To})
		if !timeRE.MatchString(e.At) || e.Generation != 0 || i > 0 && e.Seq <= got.Events[i-1].Seq {
			t.Errorf("event %d = %+v: want a timestamp, generation 0, a rising seq", i, e)
		}
	}
	clientID := a.keyIDs["acme/client"]
	if want := []step{{clientID, "issued", "", "issued"}, {clientID, "spend", "issued", "consumed"}}; !slices.Equal(steps, want) {
		t.Errorf("events = %+v, want %+v", steps, want)
	}

	// A lease shows its operation id, lease end and the event's detail.
	a.declareLease("acme")
	leased, gen := a.leased(key, "pay-1")
	v := a.inspect(op, leased.ID)
	last := v.Events[len(v.Events)-1]
	if v.State != "pending" || v.Generation != gen || v.OperationID == nil || v.LeaseExpiresAt == nil || string(v.ResultBody) != "null" ||
		last.Kind != "lease" || last.Generation != gen || !bytes.Contains(last.Detail, []byte(*v.OperationID)) {
		t.Errorf("leased token = %+v", v)
	}

	wantProblem(t, a.get(op, "/v1/admin/tokens/"+token.NewID()), http.StatusNotFound, "token_not_found")
	wantProblem(t, a.get(op, "/v1/admin/tokens/tok_x"), http.StatusNotFound, "token_not_found")
}

// Walking the pages collects every token exactly once, newest first, with
// tokens of other tenants never among them.
func TestAdminListPages(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, globex := a.client(), a.key("globex", apikey.Client)
	var want []string
	for i := range 8 {
		want = append(want, a.credit(key, fmt.Sprint("i-", i), "user-1", false).ID)
		a.credit(globex, fmt.Sprint("i-", i), "user-1", false)
	}
	want = newestFirst(want...)

	var got []string
	pages, cursor := 0, ""
	for {
		path := "/v1/admin/tokens?limit=3"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		res := a.get(a.operator(), path)
		if res.status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, res.status, res.body)
		}
		var page tokenPage
		mustUnmarshal(t, res.body, &page)
		pages++
		for _, it := range page.Items {
			got = append(got, it.ID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Errorf("%d pages of ids\n%v\nwant 3 pages of\n%v", pages, got, want)
	}
}

func TestAdminListFilters(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	bob := a.credit(key, "i-1", "bob", true)
	debit := a.issue(key, "i-2", `{"operation":"ledger.debit","subject":"alice","ttl_seconds":300}`)
	later := a.credit(key, "i-3", "alice", false)
	// Split on creation strictly: later was created an hour after the others.
	// A timestamp, not a timestamptz, plus an interval: immutable, which Citus
	// takes in an UPDATE over a column.
	a.exec(`UPDATE tokens SET created_at = (created_at AT TIME ZONE 'UTC' + interval '1 hour') AT TIME ZONE 'UTC' WHERE id = $1`, later.ID)
	split := a.inspect(a.operator(), later.ID).CreatedAt

	tests := []struct {
		query string
		want  []string
	}{
		{"", newestFirst(later.ID, debit.ID, bob.ID)},
		{"state=consumed", []string{bob.ID}},
		{"state=issued", newestFirst(later.ID, debit.ID)},
		{"state=pending", nil},
		{"operation=ledger.debit", []string{debit.ID}},
		{"subject=alice", newestFirst(later.ID, debit.ID)},
		{"subject=alice&operation=ledger.credit", []string{later.ID}},
		{"created_after=" + url.QueryEscape(split), []string{later.ID}},
		{"created_before=" + url.QueryEscape(split), newestFirst(debit.ID, bob.ID)},
		{"subject=carol", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res := a.get(a.operator(), "/v1/admin/tokens?"+tt.query)
			var page tokenPage
			mustUnmarshal(t, res.body, &page)
			var got []string
			for _, it := range page.Items {
				got = append(got, it.ID)
			}
			if res.status != http.StatusOK || !slices.Equal(got, tt.want) || page.NextCursor != nil {
				t.Errorf("?%s = %d %v (next %v), want %v", tt.query, res.status, got, page.NextCursor, tt.want)
			}
		})
	}
}

func TestAdminListBadFilters(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, query := range []string{
		"state=purged",
		"limit=0",
		"limit=-1",
		"limit=many",
		"limit=501",
		"cursor=***",
		"cursor=" + token.NewID(), // a raw id is not a cursor
		"created_after=yesterday",
		"created_before=2026-01-02",
		"stat=issued", // misspelt: must not list everything
		"state=issued&state=consumed",
	} {
		wantProblem(t, a.get(a.operator(), "/v1/admin/tokens?"+query), http.StatusBadRequest, "invalid_request")
	}
}

func TestAdminRevoke(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	tok := a.credit(key, "i-1", "user-1", false)
	path := "/v1/admin/tokens/" + tok.ID + "/revoke"

	wantProblem(t, a.post(op, path, `{}`), http.StatusBadRequest, "invalid_request")
	wantProblem(t, a.post(op, path, `{"reason":"fraud","force":true}`), http.StatusBadRequest, "invalid_request")
	if s, _ := a.tokenState(tok.ID); s != token.Issued {
		t.Fatalf("a refused revoke left the token %s", s)
	}

	res := a.post(op, path, `{"reason":"fraud report #12"}`)
	var got adminToken
	mustUnmarshal(t, res.body, &got)
	if res.status != http.StatusOK || got.ID != tok.ID || got.State != "revoked" || got.FinishedAt == nil {
		t.Errorf("revoke = %d %s", res.status, res.body)
	}
	last := a.inspect(op, tok.ID).Events[1]
	if last.Actor != a.keyIDs["acme/operator"] || last.Kind != "revoke" || !bytes.Contains(last.Detail, []byte(`"fraud report #12"`)) {
		t.Errorf("revoke event = %+v, want the operator's key id and the reason", last)
	}
	spend := spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":1}`)
	wantProblem(t, a.post(key, "/v1/tokens/consume", spend), http.StatusGone, "token_revoked")

	// Only issued tokens can be revoked; the problem names the state.
	again := wantProblem(t, a.post(op, path, `{"reason":"again"}`), http.StatusConflict, "invalid_state")
	consumed := a.credit(key, "i-2", "user-1", true)
	spent := wantProblem(t, a.post(op, "/v1/admin/tokens/"+consumed.ID+"/revoke", `{"reason":"late"}`), http.StatusConflict, "invalid_state")
	if !strings.Contains(again.Detail, "revoked") || !strings.Contains(spent.Detail, "consumed") {
		t.Errorf("details %q and %q should name the states", again.Detail, spent.Detail)
	}
	if b := a.balance("acme", "acc_1"); b != 1 {
		t.Errorf("balance = %d, want 1: only the unrevoked token took effect", b)
	}
	wantProblem(t, a.post(op, "/v1/admin/tokens/"+token.NewID()+"/revoke", `{"reason":"x"}`), http.StatusNotFound, "token_not_found")
}

func TestAdminReconcile(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	a.declareLease("acme")

	tests := []struct {
		name  string
		body  string
		state string
		kind  string
		// What the next spend gets: a replay of the stored outcome, or a
		// new lease for a token that may be spent again.
		spendStatus int
		spendBody   string // %s is the token id
	}{
		{"succeeded", `{"outcome":"succeeded","status":201,"result":{"capture":"cap_1"}}`, "consumed", "reconcile_succeeded",
			http.StatusCreated, `{"token_id":"%s","state":"consumed","result":{"capture":"cap_1"}}`},
		{"succeeded without result", `{"outcome":"succeeded"}`, "consumed", "reconcile_succeeded",
			http.StatusOK, `{"token_id":"%s","state":"consumed"}`},
		{"failed", `{"outcome":"failed","result":{"reason":"declined"}}`, "failed", "reconcile_failed",
			http.StatusUnprocessableEntity, `{"token_id":"%s","state":"failed","error":{"reason":"declined"}}`},
		{"not executed", `{"outcome":"not_executed","result":null}`, "issued", "reconcile_not_executed", http.StatusAccepted, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, gen := a.unknown(key, fmt.Sprint("pay-", i))
			res := a.post(op, "/v1/admin/tokens/"+tok.ID+"/reconcile", tt.body)
			var got adminToken
			mustUnmarshal(t, res.body, &got)
			if res.status != http.StatusOK || got.State != tt.state {
				t.Fatalf("reconcile = %d %s, want 200 and %s", res.status, res.body, tt.state)
			}
			last := a.inspect(op, tok.ID).Events
			if e := last[len(last)-1]; e.Actor != a.keyIDs["acme/operator"] || e.Kind != tt.kind || e.From == nil || *e.From != "unknown" {
				t.Errorf("event = %+v, want %s from unknown by the operator's key", e, tt.kind)
			}

			spend := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.card","subject":"user-1"}`, tok.Token))
			if tt.spendBody != "" {
				if want := fmt.Sprintf(tt.spendBody, tok.ID); spend.status != tt.spendStatus || string(spend.body) != want ||
					spend.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("spend after reconcile = %d %s, want the replay %d %s", spend.status, spend.body, tt.spendStatus, want)
				}
				return
			}
			// Not executed: the old holder is fenced off, and a new spend
			// gets a lease of its own.
			if got.Generation <= gen {
				t.Errorf("generation %d after not_executed, want more than %d", got.Generation, gen)
			}
			var lease struct{ Generation int64 }
			if err := jsonLoose(spend.body, &lease); err != nil || spend.status != tt.spendStatus || lease.Generation <= got.Generation {
				t.Errorf("spend after not_executed = %d %s, want a new lease", spend.status, spend.body)
			}
			wantProblem(t, a.post(key, "/v1/tokens/"+tok.ID+"/complete", fmt.Sprintf(`{"generation":%d}`, gen)), http.StatusConflict, "stale_generation")
		})
	}

	tok, _ := a.unknown(key, "pay-bad")
	path := "/v1/admin/tokens/" + tok.ID + "/reconcile"
	for _, body := range []string{
		`{}`,
		`{"outcome":"done"}`,
		`{"outcome":"not_executed","status":200}`,
		`{"outcome":"not_executed","result":{"x":1}}`,
		`{"outcome":"succeeded","status":404}`,
		`{"outcome":"failed","status":200}`,
		`{"outcome":"succeeded","result":{"x":}}`,
		`{"outcome":"succeeded","tenant":"globex"}`,
	} {
		wantProblem(t, a.post(op, path, body), http.StatusBadRequest, "invalid_request")
	}
	if s, _ := a.tokenState(tok.ID); s != token.Unknown {
		t.Errorf("refused reconciles left the token %s, want unknown", s)
	}
	// Only unknown tokens can be reconciled.
	issuedTok := a.credit(key, "i-1", "user-1", false)
	wantProblem(t, a.post(op, "/v1/admin/tokens/"+issuedTok.ID+"/reconcile", `{"outcome":"succeeded"}`), http.StatusConflict, "invalid_state")
	pending, _ := a.leased(key, "pay-pending")
	wantProblem(t, a.post(op, "/v1/admin/tokens/"+pending.ID+"/reconcile", `{"outcome":"not_executed"}`), http.StatusConflict, "invalid_state")
	wantProblem(t, a.post(op, "/v1/admin/tokens/"+token.NewID()+"/reconcile", `{"outcome":"succeeded"}`), http.StatusNotFound, "token_not_found")
}

// A purge deletes the caller's finished tokens past retention and nothing
// else: not the tokens still owed an outcome, not another tenant's.
func TestAdminPurge(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, globex, op := a.client(), a.key("globex", apikey.Client), a.operator()
	a.declareLease("acme")

	consumed := a.credit(key, "i-1", "user-1", true)
	revoked := a.credit(key, "i-2", "user-1", false)
	if res := a.post(op, "/v1/admin/tokens/"+revoked.ID+"/revoke", `{"reason":"test"}`); res.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", res.status, res.body)
	}
	lapsedIssue := a.credit(key, "i-3", "user-1", false)
	pending, _ := a.leased(key, "pay-1")
	unknown, _ := a.unknown(key, "pay-2")
	theirs := a.credit(globex, "i-1", "user-1", true)
	// Everything above has expired and its retention has passed, by the
	// database clock.
	a.exec(`UPDATE tokens SET expires_at = now() - interval '2 days', retain_until = now() - interval '1 day'`)
	// Past its expiry, still remembered: expired, not deleted.
	expiring := a.credit(key, "i-4", "user-1", false)
	a.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, expiring.ID)
	fresh := a.credit(key, "i-5", "user-1", true)

	res := a.post(op, "/v1/admin/purge", "")
	if res.status != http.StatusOK || string(res.body) != `{"purged":3}` {
		t.Errorf("purge = %d %s, want 200 {\"purged\":3}", res.status, res.body)
	}
	for _, tok := range []issued{consumed, revoked, lapsedIssue} {
		if a.exists(tok.ID) {
			t.Errorf("token %s survived the purge", tok.ID)
		}
	}
	for _, tt := range []struct {
		tok  issued
		want token.State
	}{{pending, token.Pending}, {unknown, token.Unknown}, {theirs, token.Consumed}, {expiring, token.Expired}, {fresh, token.Consumed}} {
		if s, _ := a.tokenState(tt.tok.ID); s != tt.want {
			t.Errorf("token %s is %s after the purge, want %s", tt.tok.ID, s, tt.want)
		}
	}
	if e := a.inspect(op, expiring.ID).Events[1]; e.Kind != "expire" || e.Actor != a.keyIDs["acme/operator"] {
		t.Errorf("expire event = %+v, want the operator's key id as actor", e)
	}

	if res := a.post(op, "/v1/admin/purge", `{}`); res.status != http.StatusOK || string(res.body) != `{"purged":0}` {
		t.Errorf("second purge = %d %s, want 200 {\"purged\":0}", res.status, res.body)
	}

	// One request deletes a bounded number, so that no request runs for
	// long: a backlog larger than that takes several.
	const backlog = 10_001
	a.exec(`INSERT INTO tokens (tenant_id, id, operation, intent_id, subject, secret_hash, secret_nonce, secret_key_id,
		fingerprint, ttl_seconds, retention_seconds, state, expires_at, retain_until)
		SELECT 'acme', 'tok_backlog' || i, 'ledger.credit', 'backlog-' || i, 'user-1', sha256(i::text::bytea), '\x00', 'k',
		       '\x00', 60, 0, 'consumed', now() - interval '2 days', now() - interval '1 day'
		FROM generate_series(1, $1::int) i`, backlog)
	var purged []int
	for {
		var out struct{ Purged int }
		res := a.post(op, "/v1/admin/purge", "")
		if res.status != http.StatusOK || jsonLoose(res.body, &out) != nil {
			t.Fatalf("purge = %d %s", res.status, res.body)
		}
		if out.Purged == 0 {
			break
		}
		purged = append(purged, out.Purged)
	}
	sum := 0
	for _, n := range purged {
		sum += n
	}
	if len(purged) < 2 || sum != backlog {
		t.Errorf("purges of a backlog of %d deleted %v, want all of it over more than one request", backlog, purged)
	}
	wantProblem(t, a.post(op, "/v1/admin/purge", `{"tenant":"globex"}`), http.StatusBadRequest, "invalid_request")
}

func TestAdminStats(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, globex := a.client(), a.key("globex", apikey.Client)
	type stats struct {
		Pending                 int64 `json:"pending"`
		Unknown                 int64 `json:"unknown"`
		OldestPendingAgeSeconds int64 `json:"oldest_pending_age_seconds"`
		OldestUnknownAgeSeconds int64 `json:"oldest_unknown_age_seconds"`
	}
	get := func() stats {
		t.Helper()
		res := a.get(a.operator(), "/v1/admin/stats")
		if res.status != http.StatusOK {
			t.Fatalf("stats: %d %s", res.status, res.body)
		}
		var s stats
		mustUnmarshal(t, res.body, &s)
		return s
	}
	if s := get(); s != (stats{}) {
		t.Errorf("stats of an empty tenant = %+v, want zeros", s)
	}

	a.declareLease("acme")
	a.declareLease("globex")
	made := func(id string, age time.Duration) {
		a.exec(`UPDATE tokens SET created_at = now() - make_interval(secs => $2) WHERE id = $1`, id, age.Seconds())
	}
	p1, _ := a.leased(key, "pay-1")
	p2, _ := a.leased(key, "pay-2")
	u1, _ := a.unknown(key, "pay-3")
	theirs, _ := a.unknown(globex, "pay-1")
	made(p1.ID, 2*time.Hour)
	made(p2.ID, time.Hour)
	made(u1.ID, 3*time.Hour)
	made(theirs.ID, 5*time.Hour)
	a.credit(key, "i-1", "user-1", true) // finished: not counted

	s := get()
	// The ages grow while the test runs; a minute of slack is plenty.
	near := func(got int64, want time.Duration) bool {
		return got >= int64(want.Seconds()) && got < int64((want+time.Minute).Seconds())
	}
	if s.Pending != 2 || s.Unknown != 1 || !near(s.OldestPendingAgeSeconds, 2*time.Hour) || !near(s.OldestUnknownAgeSeconds, 3*time.Hour) {
		t.Errorf("stats = %+v, want 2 pending (oldest 7200s), 1 unknown (oldest 10800s)", s)
	}
}

// Whatever globex's operator does with acme's token id, the answer is
// exactly the one for a token that does not exist, and acme's tokens are
// neither shown, counted nor touched.
func TestAdminTenantIsolation(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op, globexOp := a.client(), a.operator(), a.key("globex", apikey.Operator)
	a.declareLease("acme")
	issuedTok := a.credit(key, "i-1", "user-1", false)
	unknown, _ := a.unknown(key, "pay-1")
	done := a.credit(key, "i-2", "user-1", true)
	a.exec(`UPDATE tokens SET retain_until = now() - interval '1 second' WHERE id = $1`, done.ID)

	missing := token.NewID()
	tests := []struct {
		name, method, path, body string
		id                       string
	}{
		{"inspect", http.MethodGet, "/v1/admin/tokens/%s", "", issuedTok.ID},
		{"revoke", http.MethodPost, "/v1/admin/tokens/%s/revoke", `{"reason":"x"}`, issuedTok.ID},
		{"reconcile", http.MethodPost, "/v1/admin/tokens/%s/reconcile", `{"outcome":"succeeded"}`, unknown.ID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			theirs := a.do(request{method: tt.method, path: fmt.Sprintf(tt.path, tt.id), key: globexOp, body: tt.body})
			none := a.do(request{method: tt.method, path: fmt.Sprintf(tt.path, missing), key: globexOp, body: tt.body})
			if theirs.status != http.StatusNotFound || !bytes.Equal(theirs.body, none.body) || theirs.header.Get("Content-Type") != none.header.Get("Content-Type") {
				t.Errorf("%s: another tenant's token: %d %s\nmissing token: %d %s\nwant the same 404", tt.name, theirs.status, theirs.body, none.status, none.body)
			}
		})
	}

	if res := a.get(globexOp, "/v1/admin/tokens"); res.status != http.StatusOK || string(res.body) != `{"items":[],"next_cursor":null}` {
		t.Errorf("globex's list = %d %s, want no items", res.status, res.body)
	}
	if res := a.get(globexOp, "/v1/admin/stats"); string(res.body) != `{"pending":0,"unknown":0,"oldest_pending_age_seconds":0,"oldest_unknown_age_seconds":0}` {
		t.Errorf("globex's stats = %s, want zeros", res.body)
	}
	if res := a.post(globexOp, "/v1/admin/purge", ""); string(res.body) != `{"purged":0}` {
		t.Errorf("globex's purge = %s, want nothing purged", res.body)
	}

	for id, want := range map[string]token.State{issuedTok.ID: token.Issued, unknown.ID: token.Unknown, done.ID: token.Consumed} {
		if s, _ := a.tokenState(id); s != want {
			t.Errorf("acme's token %s is %s, want %s", id, s, want)
		}
	}
	var events int
	if err := a.pool.QueryRow(t.Context(), `SELECT count(*) FROM token_events WHERE actor = $1`, a.keyIDs["globex/operator"]).Scan(&events); err != nil || events != 0 {
		t.Errorf("globex's operator acted on %d tokens (%v), want 0", events, err)
	}
	// acme's own operator sees what globex's could not.
	if v := a.inspect(op, issuedTok.ID); v.ID != issuedTok.ID {
		t.Errorf("acme's inspect = %+v", v)
	}
}

// Every operator route refuses client keys and requests without a key, and
// does nothing for them.
func TestAdminNeedsOperator(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	a.declareLease("acme")
	tok := a.credit(key, "i-1", "user-1", false)
	unknown, _ := a.unknown(key, "pay-1")
	tests := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/admin/tokens/" + tok.ID, ""},
		{http.MethodGet, "/v1/admin/tokens", ""},
		{http.MethodPost, "/v1/admin/tokens/" + tok.ID + "/revoke", `{"reason":"x"}`},
		{http.MethodPost, "/v1/admin/tokens/" + unknown.ID + "/reconcile", `{"outcome":"succeeded"}`},
		{http.MethodPost, "/v1/admin/purge", ""},
		{http.MethodGet, "/v1/admin/stats", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			wantProblem(t, a.do(request{method: tt.method, path: tt.path, key: key, body: tt.body}), http.StatusForbidden, "forbidden")
			wantProblem(t, a.do(request{method: tt.method, path: tt.path, body: tt.body}), http.StatusUnauthorized, "unauthorized")
		})
	}
	if s, _ := a.tokenState(tok.ID); s != token.Issued {
		t.Errorf("token is %s, want issued", s)
	}
	if s, _ := a.tokenState(unknown.ID); s != token.Unknown {
		t.Errorf("token is %s, want unknown", s)
	}
}
