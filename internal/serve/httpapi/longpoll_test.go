package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestDrainEndsLongPollsAtOnce: on shutdown (Drain), a parked long poll
// answers at once with an empty page that keeps its cursor, which the
// client's follower reads on from; a long poll that arrives after answers
// without waiting.
func TestDrainEndsLongPollsAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hub, err := feedwait.New(feedwait.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedWaiters = hub })
	key := a.client()
	done := make(chan response, 1)
	go func() { done <- a.get(key, "/v1/events?after=0&wait=30") }()
	parked(t, hub, 1)
	a.srv.Drain()
	select {
	case r := <-done:
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"items":[],"next_cursor":"0"`) {
			t.Fatalf("drained long poll = %d %s, want 200 with no items and the same cursor", r.status, r.body)
		}
	case <-time.After(20 * time.Second): // the poll waits 30 s; Drain answers it at once
		t.Fatal("the long poll was still parked after Drain")
	}
	if r := a.get(key, "/v1/events?after=0&wait=30"); r.status != http.StatusOK {
		t.Fatalf("long poll after Drain = %d %s", r.status, r.body)
	}
}

// TestAHungUpLongPollIsNoError: a client that hangs up a long poll is
// logged at INFO as 499, not at ERROR as a 503 database outage.
func TestAHungUpLongPollIsNoError(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hub, err := feedwait.New(feedwait.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	a := newAPIOn(t, pool, func(c *httpapi.Config) { c.FeedWaiters = hub })
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/v1/events?wait=30", nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+a.client())
	rec := httptest.NewRecorder()
	served := make(chan struct{})
	go func() { defer close(served); a.srv.ServeHTTP(rec, req) }()
	parked(t, hub, 1)
	cancel()
	<-served
	logs := a.log.String()
	if rec.Code != httpapi.StatusClientClosedRequest || strings.Contains(logs, `"level":"ERROR"`) || strings.Contains(logs, `"status":503`) || !strings.Contains(logs, `"status":499`) {
		t.Fatalf("hung-up long poll = %d, logged:\n%s\nwant 499 at INFO", rec.Code, logs)
	}
}
