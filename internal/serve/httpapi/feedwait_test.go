package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// writeEvents writes n events of tenant acme, each carrying an outcome body
// of size bytes (a JSON string full of <, > and &), and positions them.
func writeEvents(t *testing.T, pool *pgxpool.Pool, n, size int) {
	t.Helper()
	ctx := context.Background()
	body := `"` + strings.Repeat("<&>", (size-2)/3) + `"`
	if _, err := pool.Exec(ctx, `
		INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
		SELECT 'acme', 'tok_' || g, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1, 200, convert_to($2, 'UTF8')
		FROM generate_series(1, $1::int) g`, n, body); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for positioned := int64(0); positioned < int64(n); {
		k, err := event.Position(ctx, pool, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if positioned += k; k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d events positioned", positioned, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
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
	pool := pgtest.NewPool(t)
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
	wantProblem(t, a.get(a.key("initech", "client"), "/v1/events?wait=5"), http.StatusTooManyRequests, "too_many_waiters")
	if r := a.get(key, "/v1/events?wait=5"); r.header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %v", r.header)
	}
	writeEvents(t, a.pool, 1, 10)
	if r := a.get(key, "/v1/events?wait=5"); r.status != http.StatusOK {
		t.Errorf("with an event to answer, past the cap = %d %s, want 200", r.status, r.body)
	}
	for range 2 {
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
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
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
		go func() { done <- a.get(key, "/v1/events?wait=10") }()
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
	pool := pgtest.NewPool(t)
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
