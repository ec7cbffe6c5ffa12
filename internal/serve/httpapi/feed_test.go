package httpapi_test

import (
	"context"
	"encoding/json"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

type feedPage struct {
	Items []struct {
		ID            string          `json:"id"`
		Position      int64           `json:"position"`
		Type          string          `json:"type"`
		TokenID       string          `json:"token_id"`
		Operation     string          `json:"operation"`
		Subject       string          `json:"subject"`
		Actor         string          `json:"actor"`
		Generation    int64           `json:"generation"`
		At            string          `json:"at"`
		From          *string         `json:"from_state"`
		To            string          `json:"to_state"`
		OutcomeStatus *int            `json:"outcome_status"`
		Outcome       json.RawMessage `json:"outcome"`
	} `json:"items"`
	NextCursor string `json:"next_cursor"`
	Epoch      string `json:"epoch"`
}

// readFeed follows key's feed from the start until it holds want events.
func (a *api) readFeed(t *testing.T, key string, want int) feedPage {
	t.Helper()
	var all feedPage
	cursor := "0"
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for len(all.Items) < want {
		if time.Now().After(deadline) {
			t.Fatalf("feed: %d of %d events after %v: %+v; %s", len(all.Items), want, pgtest.SettleTimeout, all.Items, pgtest.Unsettled(a.pool))
		}
		res := a.get(key, "/v1/events?limit=2&after="+cursor)
		if res.status != http.StatusOK {
			t.Fatalf("GET /v1/events = %d %s", res.status, res.body)
		}
		var p feedPage
		mustUnmarshal(t, res.body, &p)
		all.Items = append(all.Items, p.Items...)
		cursor = p.NextCursor
		if len(p.Items) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	all.NextCursor = cursor
	return all
}

// TestEventFeed: the state changes of a tenant's tokens come out of
// GET /v1/events with what happened, to which token, and the stored status,
// each once; another tenant sees none of them.
func TestEventFeed(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	tok := a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	spend := spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":5}`)
	if res := a.post(key, "/v1/tokens/consume", spend); res.status != http.StatusOK {
		t.Fatalf("spend = %d %s", res.status, res.body)
	}
	a.post(key, "/v1/tokens/consume", spend) // a replay changes nothing

	feed := a.readFeed(t, key, 2)
	if len(feed.Items) != 2 {
		t.Fatalf("feed = %+v, want 2 events", feed.Items)
	}
	issued, spent := feed.Items[0], feed.Items[1]
	if issued.Type != "issued" || issued.From != nil || issued.To != "issued" || issued.TokenID != tok.ID ||
		issued.Operation != "ledger.credit" || issued.Subject != "user-1" || issued.Position != 1 {
		t.Errorf("first event = %+v, want the issue of %s at position 1", issued, tok.ID)
	}
	if spent.Type != "spend" || spent.From == nil || *spent.From != "issued" || spent.To != "consumed" ||
		spent.OutcomeStatus == nil || *spent.OutcomeStatus != http.StatusOK || spent.Position != 2 || spent.ID == issued.ID {
		t.Errorf("second event = %+v, want the spend, 200 stored, at position 2", spent)
	}
	if feed.NextCursor != "2" {
		t.Errorf("next_cursor = %q, want 2", feed.NextCursor)
	}
	// Past the end: nothing, and the same cursor to keep.
	res := a.get(key, "/v1/events?after=2")
	var end feedPage
	mustUnmarshal(t, res.body, &end)
	if res.status != http.StatusOK || len(end.Items) != 0 || end.NextCursor != "2" {
		t.Errorf("read past the end = %d %s, want no events and cursor 2", res.status, res.body)
	}
	// Another tenant's feed is its own.
	res = a.get(a.key("other", apikey.Client), "/v1/events")
	var other feedPage
	mustUnmarshal(t, res.body, &other)
	if res.status != http.StatusOK || len(other.Items) != 0 {
		t.Errorf("another tenant's feed = %d %s, want empty", res.status, res.body)
	}
}

// TestEventFeedLongPoll: with wait, a read with nothing new answers once an
// event comes, not after the whole wait.
func TestEventFeedLongPoll(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	got := make(chan response, 1)
	go func() { got <- a.get(key, "/v1/events?wait=30") }()
	time.Sleep(300 * time.Millisecond)
	a.issue(key, "order-1", `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
	select {
	case res := <-got:
		var p feedPage
		mustUnmarshal(t, res.body, &p)
		if res.status != http.StatusOK || len(p.Items) != 1 || p.Items[0].Type != "issued" {
			t.Fatalf("long poll = %d %s, want the issue", res.status, res.body)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("the long poll did not answer when the event came")
	}
}

func TestEventFeedRefusesBadQueries(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	for _, q := range []string{"after=-1", "after=abc", "after=1.5", "limit=0", "limit=1001", "limit=x",
		"wait=31", "wait=-1", "wait=1s", "cursor=1", "after=1&after=2",
		"max_bytes=0", "max_bytes=-1", "max_bytes=1048577", "max_bytes=1e3", "max_bytes=1&max_bytes=2",
		"after=99999999999999999999", "limit=99999999999999999999", "wait=99999999999999999999", "max_bytes=99999999999999999999"} {
		wantProblem(t, a.get(a.client(), "/v1/events?"+q), http.StatusBadRequest, "invalid_request")
	}
	if res := a.get("", "/v1/events"); res.status != http.StatusUnauthorized {
		t.Errorf("without a key = %d, want 401", res.status)
	}
}

// TestEventFeedOutcomeOptIn: an operation declared with event_outcome puts
// the stored outcome body in its tokens' events, as spends replay it; one
// without shows none. Tokens keep the choice they were issued under.
func TestEventFeedOutcomeOptIn(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key, op := a.client(), a.operator()
	spend := func(intentID string) issued {
		tok := a.issue(key, intentID, `{"operation":"ledger.credit","subject":"user-1","ttl_seconds":300,"payload":{"account":"acc_1","amount":5}}`)
		res := a.post(key, "/v1/tokens/consume", spendBody(tok, "ledger.credit", "user-1", `{"account":"acc_1","amount":5}`))
		if res.status != http.StatusOK {
			t.Fatalf("spend = %d %s", res.status, res.body)
		}
		tok.raw = res
		return tok
	}
	plain := spend("order-1") // issued before the opt-in
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/ledger.credit", key: op,
		body: `{"mode":"atomic","ignored_fields":["trace_id"],"event_outcome":true}`}); res.status != http.StatusOK || !strings.Contains(string(res.body), `"event_outcome":true`) {
		t.Fatalf("declare with event_outcome = %d %s", res.status, res.body)
	}
	opted := spend("order-2")

	var outcomes = map[string]string{}
	for _, e := range a.readFeedRaw(t, key, 4) {
		if e.Type == "spend" {
			outcomes[e.TokenID] = string(e.Outcome)
		}
	}
	if got := outcomes[plain.ID]; got != "null" {
		t.Errorf("spend event of a token issued without the opt-in: outcome %s, want null", got)
	}
	if got, want := outcomes[opted.ID], string(opted.raw.body); got != want {
		t.Errorf("spend event of an opted-in token: outcome %s, want the stored body %s", got, want)
	}
}

type rawFeedEvent struct {
	TokenID string          `json:"token_id"`
	Type    string          `json:"type"`
	Outcome json.RawMessage `json:"outcome"`
}

// readFeedRaw follows key's feed from the start until it holds want events.
func (a *api) readFeedRaw(t *testing.T, key string, want int) []rawFeedEvent {
	t.Helper()
	var all []rawFeedEvent
	cursor := "0"
	for deadline := time.Now().Add(pgtest.SettleTimeout); len(all) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("feed: %d of %d events after %v; %s", len(all), want, pgtest.SettleTimeout, pgtest.Unsettled(a.pool))
		}
		res := a.get(key, "/v1/events?after="+cursor)
		var p struct {
			Items      []rawFeedEvent `json:"items"`
			NextCursor string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(res.body, &p); err != nil || res.status != http.StatusOK {
			t.Fatalf("GET /v1/events = %d %s", res.status, res.body)
		}
		all = append(all, p.Items...)
		cursor = p.NextCursor
		if len(p.Items) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return all
}

// TestEventFeedRefusesACursorOfAnEarlierEpoch: every page names the feed's
// epoch. Once the feed has moved to a new epoch (a restore's rebase, here
// written into the head as one leaves it: epoch "e1" left at position 2), a
// cursor of the earlier epoch past 2 is a 409 cursor_epoch naming where to
// resume, however far the feed has grown; one at or below 2 reads on, in the
// new epoch; an epoch the feed never had resumes from 0; a cursor sent
// without an epoch is not checked; a malformed epoch is a 400.
func TestEventFeedRefusesACursorOfAnEarlierEpoch(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	writeEvents(t, a.pool, 5, 10)
	var first feedPage
	res := a.get(key, "/v1/events?after=0")
	mustUnmarshal(t, res.body, &first)
	if res.status != http.StatusOK || first.Epoch == "" {
		t.Fatalf("first page = %d %s, want 200 with an epoch", res.status, res.body)
	}
	if res := a.get(key, "/v1/events?after=5&epoch="+first.Epoch); res.status != http.StatusOK {
		t.Fatalf("cursor of the feed's own epoch = %d %s, want 200", res.status, res.body)
	}
	if _, err := a.pool.Exec(context.Background(), `
		UPDATE event_feed_heads
		SET prior_epochs = ARRAY['e1'], prior_bases = ARRAY[0::bigint], epoch = 'e2', epoch_base = 2
		WHERE tenant_id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query, resume string
	}{
		{"after=3&epoch=e1", "after=2&epoch=e2"},
		{"after=5&epoch=e1&wait=1", "after=2&epoch=e2"},
		{"after=9223372036854775807&epoch=e1", "after=2&epoch=e2"},
		{"after=1&epoch=e0", "after=0&epoch=e2"},
	} {
		p := wantProblem(t, a.get(key, "/v1/events?"+c.query), http.StatusConflict, "cursor_epoch")
		if !strings.Contains(p.Detail, c.resume) {
			t.Errorf("%s: detail %q does not say %s", c.query, p.Detail, c.resume)
		}
	}
	for _, q := range []string{"after=2&epoch=e1", "after=0&epoch=e1", "after=0&epoch=e0", "after=3&epoch=e2", "after=3"} {
		var page feedPage
		res := a.get(key, "/v1/events?"+q)
		mustUnmarshal(t, res.body, &page)
		if res.status != http.StatusOK || page.Epoch != "e2" || len(page.Items) == 0 {
			t.Errorf("%s = %d %s, want 200 with events in epoch e2", q, res.status, res.body)
		}
	}
	for _, q := range []string{"epoch=", "epoch=a%20b", "epoch=" + strings.Repeat("x", 65), "epoch=%00", "epoch=e1&epoch=e2"} {
		if q == "epoch=" {
			// Empty is no epoch.
			if res := a.get(key, "/v1/events?after=3&"+q); res.status != http.StatusOK {
				t.Errorf("%s = %d %s, want 200", q, res.status, res.body)
			}
			continue
		}
		wantProblem(t, a.get(key, "/v1/events?after=1&"+q), http.StatusBadRequest, "invalid_request")
	}
}

// writeEvents writes n events of tenant acme, each carrying an outcome body
// of size bytes (a JSON string full of <, > and &), and positions them.
func writeEvents(t *testing.T, pool *pgxpool.Pool, n, size int) {
	t.Helper()
	ctx := context.Background()
	body := `"` + strings.Repeat("<&>", (size-2)/3) + `"`
	// Counted in the table, not by what this helper's own calls position:
	// a waiter or the hub's poll may position them first.
	positionedNow := func() int64 {
		var k int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_positions WHERE tenant_id = 'acme'`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	before := positionedNow()
	if _, err := pool.Exec(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
		SELECT 'acme', 'tok_' || g, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1, 200, convert_to($2, 'UTF8')
		FROM generate_series(1, $1::int) g`, n, body); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for {
		if _, err := event.Position(ctx, pool, "acme"); err != nil {
			t.Fatal(err)
		}
		positioned := positionedNow() - before
		if positioned >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events positioned after %v; %s", positioned, n, pgtest.SettleTimeout, pgtest.Unsettled(pool))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEventFeedPagesAreBoundedInBytes: a page's body stays within max_bytes
// (default 1 MiB) unless it holds a single event, which comes however
// large; bodies are sent with <, > and & as they are, not escaped.
func TestEventFeedPagesAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	const size = 300 << 10
	writeEvents(t, a.pool, 5, size)
	for _, c := range []struct {
		query string
		items int
	}{
		{"after=0", 3},
		{"after=0&max_bytes=700000", 2},
		{"after=0&max_bytes=1", 1},
		{"after=3&limit=1000", 2},
	} {
		res := a.get(key, "/v1/events?"+c.query)
		var p feedPage
		mustUnmarshal(t, res.body, &p)
		limit := event.MaxBytes
		if i := strings.Index(c.query, "max_bytes="); i >= 0 {
			limit, _ = strconv.Atoi(c.query[i+len("max_bytes="):])
		}
		if res.status != http.StatusOK || len(p.Items) != c.items || len(p.Items) > 1 && len(res.body) > limit {
			t.Errorf("%s: %d, %d events in %d bytes, want %d events within %d bytes", c.query, res.status, len(p.Items), len(res.body), c.items, limit)
		}
		if strings.Contains(string(res.body), `\u003c`) || len(p.Items) > 0 && len(p.Items[0].Outcome) > size {
			t.Errorf("%s: the outcome is escaped (%d bytes stored, %d sent)", c.query, size, len(p.Items[0].Outcome))
		}
	}
	wantProblem(t, a.get(key, "/v1/events?max_bytes=0"), http.StatusBadRequest, "invalid_request")
	wantProblem(t, a.get(key, "/v1/events?max_bytes=1048577"), http.StatusBadRequest, "invalid_request")
}

// TestEventFeedRefusesACursorAheadOfIt: a cursor past the feed's last
// position is a 409 cursor_ahead naming that position, not an empty page.
func TestEventFeedRefusesACursorAheadOfIt(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	key := a.client()
	writeEvents(t, a.pool, 2, 10)
	if res := a.get(key, "/v1/events?after=2"); res.status != http.StatusOK {
		t.Fatalf("at the head = %d %s, want 200", res.status, res.body)
	}
	for _, q := range []string{"after=3", "after=3&wait=1", "after=9223372036854775807"} {
		p := wantProblem(t, a.get(key, "/v1/events?"+q), http.StatusConflict, "cursor_ahead")
		if !strings.Contains(p.Detail, "(2)") {
			t.Errorf("%s: detail %q does not name the last position, 2", q, p.Detail)
		}
	}
}

// TestEventFeedCapsWaiters: past the cap on a tenant's waiters, a long poll
// with nothing to answer gets 429 too_many_waiters with Retry-After; one
// with events to answer is still answered; another tenant still waits.
func TestEventFeedCapsWaiters(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	hub, err := feedwait.New(feedwait.Config{Pool: pool, MaxWaitersPerTenant: 2, MaxWaiters: 3})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedWaiters = hub })
	key, other := a.client(), a.key("globex", "client")
	done := make(chan response, 3)
	for range 2 {
		go func() { done <- a.get(key, "/v1/events?wait=5") }()
	}
	parked(t, hub, 2)
	res := wantProblem(t, a.get(key, "/v1/events?wait=5"), http.StatusTooManyRequests, "too_many_waiters")
	_ = res
	go func() { done <- a.get(other, "/v1/events?wait=5") }()
	parked(t, hub, 3)
	// The hub is full, and shared: initech, with none, takes the slot of
	// one of acme's waits (acme has the most), which answers its empty
	// page at once, keeping the cursor.
	go func() { done <- a.get(a.key("initech", "client"), "/v1/events?wait=5") }()
	if r := <-done; r.status != http.StatusOK || !strings.Contains(string(r.body), `"items":[],"next_cursor":"0"`) {
		t.Errorf("the wait that gave its slot = %d %s, want 200 with no items and the same cursor", r.status, r.body)
	}
	parked(t, hub, 3)
	// Now every tenant holds one: none takes another's slot.
	if r := wantProblem(t, a.get(key, "/v1/events?wait=5"), http.StatusTooManyRequests, "too_many_waiters"); r.Detail == "" {
		t.Error("429 without a detail")
	}
	if r := a.get(key, "/v1/events?wait=5"); r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %v", r.header)
	}
	writeEvents(t, a.pool, 1, 10)
	if r := a.get(key, "/v1/events?wait=5"); r.status != http.StatusOK {
		t.Errorf("with an event to answer, past the cap = %d %s, want 200", r.status, r.body)
	}
	for range 3 {
		if r := <-done; r.status != http.StatusOK {
			t.Errorf("parked waiter = %d %s", r.status, r.body)
		}
	}
}

// parked waits until hub has n waiters.
func parked(t testing.TB, hub *feedwait.Hub, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if total, _ := hub.Waiters(); total == n {
			return
		}
		if time.Now().After(deadline) {
			total, per := hub.Waiters()
			t.Fatalf("%d waiters parked (%v), want %d", total, per, n)
		}
	}
}

// settled waits until the pool has sent no statement for three poll
// intervals: the waiters' first reads and the wake-up of the hub's first
// poll are over, however late they came on a loaded machine or a cluster.
func settled(t *testing.T, tracer *countingTracer, interval time.Duration) {
	t.Helper()
	last, quiet := tracer.n.Load(), 0
	for deadline := time.Now().Add(30 * time.Second); quiet < 3; {
		if time.Now().After(deadline) {
			t.Fatal("the pool kept sending statements for 30s after the waiters parked")
		}
		time.Sleep(interval)
		n := tracer.n.Load()
		if n == last {
			quiet++
		} else {
			last, quiet = n, 0
		}
	}
}

// countingTracer counts the statements sent on a pool.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEventFeedIdleWaitersIssueNoStatements: 50 long polls parked on an
// empty feed cost the database the hub's one statement per poll interval,
// not one per waiter; an event wakes them all.
func TestEventFeedIdleWaitersIssueNoStatements(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(ledgertest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const interval = 100 * time.Millisecond
	hub, err := feedwait.New(feedwait.Config{Pool: pool, PollInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedWaiters = hub })
	key := a.client()
	a.get(key, "/v1/events") // the key resolved and cached
	const waiters = 50
	done := make(chan response, waiters)
	for range waiters {
		// The longest wait: under load, settling and the idle window below
		// can take many seconds, and a waiter that gave up before the event
		// is written would leave nobody to position it.
		go func() { done <- a.get(key, "/v1/events?wait=30") }()
	}
	parked(t, hub, waiters)
	settled(t, tracer, interval)
	before := tracer.n.Load()
	time.Sleep(20 * interval)
	idle := tracer.n.Load() - before
	// The hub's poll, 20 or so; polling waiters would send 2 each per poll.
	if idle >= waiters {
		t.Errorf("%d parked waiters sent %d statements in %d poll intervals, want the hub's one per interval", waiters, idle, 20)
	}
	t.Logf("%d statements from %d parked waiters in %d poll intervals", idle, waiters, 20)
	writeEvents(t, pool, 1, 10)
	for range waiters {
		if r := <-done; r.status != http.StatusOK || !strings.Contains(string(r.body), `"position":1`) {
			t.Fatalf("woken waiter = %d %s, want the event", r.status, r.body)
		}
	}
}

// TestEventFeedWakesOnNotification: with the hub's own poll too slow to
// matter, a waiter answers once another process positions an event: the
// positioning notifies, and the hub's LISTEN hears it.
func TestEventFeedWakesOnNotification(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	hub, err := feedwait.New(feedwait.Config{Pool: pool, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedWaiters = hub })
	key := a.client()
	done := make(chan response, 1)
	go func() { done <- a.get(key, "/v1/events?wait=20") }()
	parked(t, hub, 1)
	time.Sleep(200 * time.Millisecond) // the hub listens
	writeEvents(t, pool, 1, 10)
	select {
	case r := <-done:
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"position":1`) {
			t.Fatalf("waiter = %d %s, want the event", r.status, r.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not woken by the notification")
	}
}
