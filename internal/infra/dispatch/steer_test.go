package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/webhook"
)

// TestGoneDisablesAndParks: an endpoint answering 410 Gone is disabled at
// once, with the reason shown; its deliveries are parked, not pending (not
// lag) and not tried; enabled again, they resume and are all applied.
func TestGoneDisablesAndParks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "")
	var gone atomic.Bool
	gone.Store(true)
	inner := c.srv.Config.Handler
	c.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			c.got.Add(1)
			http.Error(w, "gone", http.StatusGone)
			return
		}
		inner.ServeHTTP(w, r)
	})
	writeEvents(t, pool, "a", 5)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, Batch: 1})
	until(t, d, func() bool {
		e, err := dispatch.Get(ctx, pool, "a", ep.ID)
		return err == nil && !e.Enabled
	})
	e, _ := dispatch.Get(ctx, pool, "a", ep.ID)
	if want := "the endpoint answered 410 Gone at "; len(e.DisabledReason) < len(want) || e.DisabledReason[:len(want)] != want {
		t.Errorf("disabled reason %q, want the 410", e.DisabledReason)
	}
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == 5
	})
	if n := parkedIn(t, pool, ep.ID); n != 5 {
		t.Errorf("the record shows %d deliveries parked, want 5", n)
	}
	if m := gather(t, d); m["tokend_webhook_parked"] != 5 || m["tokend_webhook_undelivered"] != 0 {
		t.Errorf("metrics %v, want 5 parked, 0 undelivered", m)
	}
	tried := c.got.Load()
	if tried != 1 {
		t.Errorf("%d attempts before the endpoint was disabled, want 1", tried)
	}
	for range 5 {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.got.Load() != tried {
		t.Errorf("parked deliveries were tried: %d, then %d", tried, c.got.Load())
	}
	gone.Store(false)
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := parkedIn(t, pool, ep.ID); n != 0 {
		t.Errorf("%d deliveries still parked after enabling", n)
	}
	until(t, d, func() bool { return c.effects() == 5 })
}

// TestDisabledEndpointParksItsDeliveries: an operator's disable parks the
// pending deliveries, which the metrics do not count as owed; enable
// resumes them.
func TestDisabledEndpointParksItsDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	writeEvents(t, pool, "a", 3)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour})
	until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE attempts > 0`) == 3 })
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	if n := parkedIn(t, pool, ep.ID); n != 3 {
		t.Errorf("the record shows %d parked, want 3", n)
	}
	metrics := gather(t, d)
	if metrics["tokend_webhook_undelivered"] != 0 || metrics["tokend_webhook_parked"] != 3 || metrics["tokend_webhook_endpoints_disabled"] != 1 {
		t.Errorf("metrics = %v, want 0 undelivered, 3 parked, 1 endpoint disabled", metrics)
	}
	c.down.Store(false)
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool { return c.effects() == 3 })
	if got := gather(t, d); got["tokend_webhook_delivery_lag_seconds_count"] != 3 {
		t.Errorf("lag observed %v times, want 3", got["tokend_webhook_delivery_lag_seconds_count"])
	}
}

// TestRetryAfterHonoured: a 429 or 503 with Retry-After waits what it asks,
// bounded by RetryAfterMax and never less than the backoff's floor;
// without it, the usual backoff.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status     int
		retryAfter string
		min, max   time.Duration // of the wait recorded
	}{
		{429, "120", 119 * time.Second, 121 * time.Second},
		{503, "86400", 599 * time.Second, 601 * time.Second},     // bounded by RetryAfterMax
		{503, "date+300s", 297 * time.Second, 301 * time.Second}, // an HTTP date, 300 s after the answer
		{503, "soon", 0, 2 * time.Second},                        // unreadable: the backoff (base 1 s)
		{500, "120", 0, 2 * time.Second},                         // not 429 or 503: the backoff
		{429, "-5", 0, 2 * time.Second},                          // unreadable
		// Retry-After never shortens the backoff below its floor (half the
		// base, 500 ms): "0" and a past date once meant no wait at all.
		{429, "0", 500 * time.Millisecond, time.Second + time.Millisecond},
		{503, "date-300s", 500 * time.Millisecond, time.Second + time.Millisecond},
	} {
		t.Run(fmt.Sprint(c.status, " ", c.retryAfter), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			keys := keyring(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				v := c.retryAfter
				switch v {
				case "date+300s":
					v = time.Now().Add(300 * time.Second).UTC().Format(http.TimeFormat)
				case "date-300s":
					v = time.Now().Add(-300 * time.Second).UTC().Format(http.TimeFormat)
				}
				w.Header().Set("Retry-After", v)
				w.WriteHeader(c.status)
			}))
			defer srv.Close()
			if _, _, err := dispatch.Create(context.Background(), pool, keys, local, "a", dispatch.NewEndpoint{URL: srv.URL}); err != nil {
				t.Fatal(err)
			}
			writeEvents(t, pool, "a", 1)
			d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Second, BackoffMax: time.Second, RetryAfterMax: 600 * time.Second})
			until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_attempts`) == 1 })
			var wait time.Duration
			if err := pool.QueryRow(context.Background(), `
				SELECT d.next_attempt_at - a.at FROM webhook_deliveries d JOIN webhook_attempts a USING (tenant_id, endpoint_id, pos)`).Scan(&wait); err != nil {
				t.Fatal(err)
			}
			if wait < c.min || wait > c.max {
				t.Errorf("waits %v after the attempt, want %v to %v", wait, c.min, c.max)
			}
		})
	}
}

// TestRedeliverHurriesAndSelects: redeliver sends failed deliveries; with
// all it hurries a pending one waiting out its backoff; delivered ones are
// sent again only when asked; a position selects one.
func TestRedeliverHurriesAndSelects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	writeEvents(t, pool, "a", 3)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour, BackoffMax: time.Hour})
	until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE attempts = 1`) == 3 })
	c.down.Store(false)
	for range 3 { // waiting out an hour's backoff: nothing is sent
		if n, err := d.Round(ctx); err != nil || n != 0 {
			t.Fatalf("round = %d, %v; want nothing due", n, err)
		}
	}
	if n, err := dispatch.Redeliver(ctx, pool, "a", ep.ID, 0, false); err != nil || n != 0 {
		t.Errorf("Redeliver without all = %d, %v; want 0: nothing failed", n, err)
	}
	var first int64
	if err := pool.QueryRow(ctx, `SELECT min(pos) FROM webhook_deliveries`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if n, err := dispatch.Resend(ctx, pool, "a", ep.ID, dispatch.Selection{Position: first}); err != nil || n != 1 {
		t.Fatalf("Resend(position %d) = %d, %v; want 1", first, n, err)
	}
	until(t, d, func() bool { return c.effects() == 1 })
	if n, err := dispatch.Redeliver(ctx, pool, "a", ep.ID, 0, true); err != nil || n != 2 {
		t.Fatalf("Redeliver(all) = %d, %v; want the 2 pending", n, err)
	}
	until(t, d, func() bool { return c.effects() == 3 })
	if n, err := dispatch.Redeliver(ctx, pool, "a", ep.ID, 0, true); err != nil || n != 0 {
		t.Errorf("Redeliver(all) after every delivery = %d, %v; want 0", n, err)
	}
	got := c.got.Load()
	if n, err := dispatch.Resend(ctx, pool, "a", ep.ID, dispatch.Selection{All: true, Delivered: true}); err != nil || n != 3 {
		t.Fatalf("Resend(delivered) = %d, %v; want 3", n, err)
	}
	until(t, d, func() bool { return c.got.Load() == got+3 })
	if c.effects() != 3 {
		t.Errorf("%d effects, want 3: the consumer deduplicates", c.effects())
	}
	if _, err := dispatch.Resend(ctx, pool, "a", ep.ID, dispatch.Selection{Position: -1}); !errors.Is(err, dispatch.ErrInvalidRequest) {
		t.Errorf("Resend(position -1) = %v", err)
	}
}

// TestEndpointCap: a tenant registers at most MaxEndpoints endpoints, also
// when it tries many at once; another tenant is not counted against it.
func TestEndpointCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	o := dispatch.Options{MaxEndpoints: 3}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 12 {
		wg.Go(func() {
			_, _, err := dispatch.CreateWith(ctx, pool, keys, o, "a", dispatch.NewEndpoint{URL: fmt.Sprintf("https://hooks.example/%d", i)})
			switch {
			case errors.Is(err, dispatch.ErrTooManyEndpoints):
				refused.Add(1)
			case err != nil:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE tenant_id = 'a'`); n != 3 || refused.Load() != 9 {
		t.Errorf("%d endpoints registered, %d refused; want 3 and 9", n, refused.Load())
	}
	if _, _, err := dispatch.CreateWith(ctx, pool, keys, o, "b", dispatch.NewEndpoint{URL: "https://hooks.example/b"}); err != nil {
		t.Errorf("another tenant: %v", err)
	}
}

// TestRotationSignsWithBoth: after a rotation, a receiver still holding the
// old secret and one holding the new both verify every delivery; once the
// overlap ends, only the new one does.
func TestRotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "")
	old := c.secret.Load().(string)
	rotated, next, err := dispatch.RotateSecret(ctx, pool, keys, "a", ep.ID, time.Hour)
	if err != nil || next == old || rotated.PreviousSecretUntil == nil {
		t.Fatalf("RotateSecret = %+v, %q, %v", rotated, next, err)
	}
	type verdict struct{ old, next error }
	var mu sync.Mutex
	var got []verdict
	c.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, verdict{webhook.Verify(old, r.Header, body), webhook.Verify(next, r.Header, body)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	seen := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == n }
	}
	writeEvents(t, pool, "a", 2)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	until(t, d, seen(2))
	// The overlap ends: only the new secret signs.
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET prev_secret_until = now()`); err != nil {
		t.Fatal(err)
	}
	if n, err := dispatch.Resend(ctx, pool, "a", ep.ID, dispatch.Selection{All: true, Delivered: true}); err != nil || n != 2 {
		t.Fatalf("Resend = %d, %v", n, err)
	}
	until(t, d, seen(4))
	mu.Lock()
	defer mu.Unlock()
	for i, v := range got {
		if v.next != nil {
			t.Errorf("delivery %d: not verified under the new secret: %v", i, v.next)
		}
		if i < 2 && v.old != nil {
			t.Errorf("delivery %d, in the overlap: not verified under the old secret: %v", i, v.old)
		}
		if i >= 2 && !errors.Is(v.old, webhook.ErrInvalidSignature) {
			t.Errorf("delivery %d, after the overlap: the old secret verifies it (%v)", i, v.old)
		}
	}
	if e, err := dispatch.Get(ctx, pool, "a", ep.ID); err != nil || e.PreviousSecretUntil != nil {
		t.Errorf("after the overlap: %+v, %v", e, err)
	}
}

// parkedIn is how many of the endpoint's deliveries its record shows
// parked.
func parkedIn(t *testing.T, pool *pgxpool.Pool, id string) int {
	t.Helper()
	ds, err := dispatch.Recent(context.Background(), pool, "a", id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range ds {
		if x.State == "parked" {
			n++
		}
	}
	return n
}

// gather is d's metrics by name: a gauge's or counter's value (summed over
// labels), and a histogram's sample count as name_count.
func gather(t *testing.T, d *dispatch.Dispatcher) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestHangingTenantDelaysOnlyItself: tenant A's endpoints accept and never
// answer; they hold at most TenantConcurrency attempts (EndpointConcurrency
// each) while tenant B's deliveries all go through the same dispatcher.
func TestHangingTenantDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	release := make(chan struct{})
	var inflight, most atomic.Int64
	perEndpoint := sync.Map{} // path → *atomic.Int64
	var mostEndpoint atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		v, _ := perEndpoint.LoadOrStore(r.URL.Path, new(atomic.Int64))
		e := v.(*atomic.Int64).Add(1)
		defer v.(*atomic.Int64).Add(-1)
		for m := mostEndpoint.Load(); e > m && !mostEndpoint.CompareAndSwap(m, e); m = mostEndpoint.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	for i := range 10 {
		if _, _, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: fmt.Sprintf("%s/%d", hang.URL, i)}); err != nil {
			t.Fatal(err)
		}
	}
	b := newConsumer(t, pool)
	_, secret, err := dispatch.Create(ctx, pool, keys, local, "b", dispatch.NewEndpoint{URL: b.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b.secret.Store(secret)
	writeEvents(t, pool, "a", 20)
	writeEvents(t, pool, "b", 20)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, Timeout: time.Minute, Lease: 2 * time.Minute,
		Interval: 10 * time.Millisecond, EndpointConcurrency: 2, TenantConcurrency: 5, Workers: 16})
	go func() { _ = d.Run(ctx) }()
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for b.effects() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("tenant b got %d of 20 events applied while a's endpoints hang", b.effects())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if most.Load() > 5 || mostEndpoint.Load() > 2 {
		t.Errorf("a had %d attempts in flight at most (%d on one endpoint); want at most 5 (2)", most.Load(), mostEndpoint.Load())
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = 'a' AND leased_until > now()`); n > 5 {
		t.Errorf("%d of a's deliveries leased, want at most 5", n)
	}
}

// TestEndpointReceivesPositions: per-token order is not promised (retries
// overtake), but every delivery carries the event's feed position, which
// follows the order in which a token's events were committed, so a
// receiver can order them.
func TestEndpointReceivesPositions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	var mu sync.Mutex
	got := map[string]int64{} // event id → position delivered
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var d webhook.Delivery
		if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[d.Data.ID] = d.Data.Position
		mu.Unlock()
	}))
	defer srv.Close()
	if _, _, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: srv.URL}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // one token's events, each committed on its own
		if _, err := pool.Exec(ctx, `
			INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
			VALUES ('a', 'tok_1', 'pay', 'a', 'test', 'spend', 'issued', 'consumed', $1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	until(t, d, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 6 })
	rows, err := pool.Query(ctx, `SELECT event_id FROM token_events WHERE token_id = 'tok_1' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(ids); i++ {
		if got[ids[i]] <= got[ids[i-1]] || got[ids[i-1]] == 0 {
			t.Errorf("event %d of the token delivered with position %d, after %d", i, got[ids[i]], got[ids[i-1]])
		}
	}
}
