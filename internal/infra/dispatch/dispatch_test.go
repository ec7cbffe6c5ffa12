package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
	"github.com/tokend/tokend/webhook"
)

// consumer is a webhook receiver that verifies each delivery and applies its
// effect once per event, in one transaction with its dedup row.
type consumer struct {
	t      *testing.T
	pool   *pgxpool.Pool
	secret atomic.Value // string
	down   atomic.Bool  // answer 503 to everything
	got    atomic.Int64 // deliveries received, verified or not
	mu     sync.Mutex
	bad    []string
	srv    *httptest.Server
}

func newConsumer(t *testing.T, pool *pgxpool.Pool) *consumer {
	c := &consumer{t: t, pool: pool}
	for _, sql := range []string{webhook.Schema, `CREATE TABLE IF NOT EXISTS effects (event_id text NOT NULL, tenant text NOT NULL)`} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *consumer) serve(w http.ResponseWriter, r *http.Request) {
	c.got.Add(1)
	if c.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	d, err := webhook.Receive(c.secret.Load().(string), r)
	if err != nil {
		c.mu.Lock()
		c.bad = append(c.bad, err.Error())
		c.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	err = pgx.BeginFunc(r.Context(), c.pool, func(tx pgx.Tx) error {
		first, err := webhook.OnceTx(r.Context(), tx, d.Data.ID)
		if err != nil || !first {
			return err
		}
		_, err = tx.Exec(r.Context(), `INSERT INTO effects VALUES ($1, $2)`, d.Data.ID, d.Data.Subject)
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (c *consumer) effects() int64 {
	var n int64
	if err := c.pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

func keyring(t testing.TB) *token.Keyring {
	k, err := token.NewKeyring("dispatch-test-key-0123456789abcdefghijkl")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeEvents commits n events of tenant, each in a transaction of its own;
// the subject names the tenant, so a consumer can tell whose it got.
func writeEvents(t *testing.T, pool *pgxpool.Pool, tenant string, n int) {
	for i := range n {
		if _, err := pool.Exec(context.Background(), `
			INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status)
			VALUES ($1, $2, 'pay', $1, 'test', 'spend', 'issued', 'consumed', 0, 200)`, tenant, fmt.Sprintf("tok_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// local allows the tests' receivers, which listen on loopback.
var local = []string{"127.0.0.1"}

// newDispatcher is a dispatcher configured by cfg, allowed to deliver to
// loopback unless cfg says where it may deliver.
func newDispatcher(t *testing.T, cfg dispatch.Config) *dispatch.Dispatcher {
	cfg.Logger = slog.New(slog.DiscardHandler)
	if cfg.AllowedHosts == nil {
		cfg.AllowedHosts = local
	}
	d, err := dispatch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// until runs rounds of d until cond holds, failing after pgtest.SettleTimeout.
func until(t *testing.T, d *dispatch.Dispatcher, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached after %v of rounds", pgtest.SettleTimeout)
		}
		if _, err := d.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// hooked is a test's database, keyring and consumer, with an endpoint of
// tenant "a" registered for it (of types, all when none) and the consumer
// holding its secret. down starts the consumer answering 503.
func hooked(t *testing.T, down bool, path string, types ...string) (*pgxpool.Pool, *token.Keyring, *consumer, dispatch.Endpoint) {
	t.Helper()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	c := newConsumer(t, pool)
	c.down.Store(down)
	ep, secret, err := dispatch.Create(context.Background(), pool, keys, local, "a", dispatch.NewEndpoint{URL: c.srv.URL + path, EventTypes: types})
	if err != nil {
		t.Fatal(err)
	}
	c.secret.Store(secret)
	return pool, keys, c, ep
}

// TestEveryEventDeliveredAndAppliedOnce: signed deliveries of a tenant's
// events reach its endpoint, and only its; the consumer applies each once.
func TestEveryEventDeliveredAndAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "/hook")
	writeEvents(t, pool, "a", 20)
	writeEvents(t, pool, "b", 5) // another tenant's: never sent to a's endpoint
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, Batch: 7})
	until(t, d, func() bool { return c.effects() == 20 })
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`); n != 20 {
		t.Errorf("%d deliveries delivered, want 20", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM effects WHERE tenant <> 'a'`); n != 0 {
		t.Errorf("%d effects of another tenant's events", n)
	}
	if len(c.bad) != 0 {
		t.Errorf("refused deliveries: %v", c.bad)
	}
	// The secret is not stored anywhere.
	secret := c.secret.Load().(string)
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints WHERE position($1::bytea IN secret_nonce) > 0 OR url LIKE '%' || $2 || '%'`, []byte(secret), secret); n != 0 {
		t.Error("the signing secret is stored")
	}
	got, err := dispatch.Get(ctx, pool, "a", ep.ID)
	if err != nil || got.FeedPosition != 20 {
		t.Errorf("endpoint = %+v, %v; want feed position 20", got, err)
	}
}

// TestReceiverDownCatchesUp: while the receiver answers 503, deliveries
// wait and retry; once it is back, every event is applied once.
func TestReceiverDownCatchesUp(t *testing.T) {
	t.Parallel()
	pool, keys, c, _ := hooked(t, true, "")
	writeEvents(t, pool, "a", 10)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	until(t, d, func() bool { return c.got.Load() >= 50 }) // several attempts each
	if c.effects() != 0 {
		t.Fatal("effects while down")
	}
	c.down.Store(false)
	until(t, d, func() bool { return c.effects() == 10 })
	if n := count(t, pool, `SELECT count(*) FROM webhook_attempts WHERE status = 503`); n < 40 {
		t.Errorf("%d failed attempts recorded, want every one of at least 40", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'`); n != 0 {
		t.Errorf("%d deliveries not delivered", n)
	}
}

// TestLostRecordIsRedelivered: a dispatcher that sent a delivery but died
// before recording the answer leaves a lease that runs out; the delivery is
// sent again and the consumer applies it once.
func TestLostRecordIsRedelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, _ := hooked(t, false, "")
	writeEvents(t, pool, "a", 3)
	cfg := dispatch.Config{Pool: pool, Keys: keys, Lease: time.Hour}
	dying := newDispatcher(t, cfg)
	// Events get their feed positions once other tests' transactions on the
	// server are done: send until all three went out.
	for sent, deadline := 0, time.Now().Add(pgtest.SettleTimeout); sent < 3; {
		n, err := dispatch.SendWithoutRecording(ctx, dying)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("dying dispatcher sent %d of 3, %v", sent+n, err)
		}
		sent += n
	}
	if c.effects() != 3 || c.got.Load() != 3 {
		t.Fatalf("after the first sends: %d effects of %d deliveries", c.effects(), c.got.Load())
	}
	// Until the lease runs out, nobody sends them again.
	other := newDispatcher(t, cfg)
	if n, err := other.Round(ctx); err != nil || n != 0 {
		t.Fatalf("a round during the lease attempted %d, %v; want 0", n, err)
	}
	// The dead dispatcher's leases run out (moved to now, not waited for).
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET leased_until = now() WHERE leased_until IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	until(t, other, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`) == 3
	})
	if c.got.Load() != 6 || c.effects() != 3 {
		t.Errorf("%d deliveries received, %d effects; want 6 and 3", c.got.Load(), c.effects())
	}
}

// TestDeliveriesPastMaxAgeFail: a delivery that keeps failing is tried
// until its maximum age, then fails for good and is not tried again; an
// operator's redeliver gets it applied.
func TestDeliveriesPastMaxAgeFail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "", "spend")
	writeEvents(t, pool, "a", 4)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, MaxAge: 100 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'failed'`) == 4
	})
	tried := c.got.Load()
	for range 5 {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.got.Load() != tried {
		t.Errorf("failed deliveries were tried again: %d, then %d", tried, c.got.Load())
	}
	c.down.Store(false)
	if n, err := dispatch.Redeliver(ctx, pool, "a", ep.ID, 0, false); err != nil || n != 4 {
		t.Fatalf("Redeliver = %d, %v; want 4", n, err)
	}
	until(t, d, func() bool { return c.effects() == 4 })
}

// TestFailingEndpointIsDisabled: an endpoint whose every attempt has failed
// for DisableAfter is disabled and tried no more; enabled again, it gets
// every event applied.
func TestFailingEndpointIsDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, true, "")
	writeEvents(t, pool, "a", 4)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, DisableAfter: 100 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	until(t, d, func() bool {
		e, err := dispatch.Get(ctx, pool, "a", ep.ID)
		return err == nil && !e.Enabled && e.DisabledReason != ""
	})
	tried := c.got.Load()
	for range 5 {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c.got.Load() != tried {
		t.Errorf("a disabled endpoint was tried: %d, then %d", tried, c.got.Load())
	}
	c.down.Store(false)
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool { return c.effects() == 4 })
}

func TestCreateRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	for _, tc := range []struct {
		url     string
		types   []string
		allowed []string
		want    error
	}{
		{"ftp://example.com/", nil, nil, dispatch.ErrInvalidRequest},
		{"/relative", nil, nil, dispatch.ErrInvalidRequest},
		{"https://user:pw@example.com/", nil, nil, dispatch.ErrInvalidRequest},
		{"https://example.com/", []string{"nope"}, nil, dispatch.ErrInvalidRequest},
		{"https://evil.example/", nil, []string{"hooks.example"}, dispatch.ErrHostNotAllowed},
		{"https://bad\x00.example/", nil, nil, dispatch.ErrInvalidRequest},
	} {
		if _, _, err := dispatch.Create(ctx, pool, keys, tc.allowed, "a", dispatch.NewEndpoint{URL: tc.url, EventTypes: tc.types}); !errors.Is(err, tc.want) {
			t.Errorf("Create(%q, %v) = %v, want %v", tc.url, tc.types, err, tc.want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_endpoints`); n != 0 {
		t.Errorf("%d endpoints registered by refused calls", n)
	}
}

// TestSenderFollowsNoRedirect: a 3xx is a failed attempt, never followed.
func TestSenderFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	var followed atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed.Store(true) }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	if _, _, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: redirect.URL}); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 1)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour})
	until(t, d, func() bool { return count(t, pool, `SELECT count(*) FROM webhook_attempts WHERE status = 307`) == 1 })
	if followed.Load() {
		t.Error("the redirect was followed")
	}
}

// TestRetryIsTheSameMessage: every attempt of a delivery carries the same
// body byte for byte, whose timestamp is when the event happened; only the
// webhook-timestamp header and the signature are the attempt's.
func TestRetryIsTheSameMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	var mu sync.Mutex
	var bodies [][]byte
	var secret atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret.Load().(string), r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, body)
		if len(bodies) < 3 {
			http.Error(w, "again", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	_, s, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	secret.Store(s)
	writeEvents(t, pool, "a", 1)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: 600 * time.Millisecond, BackoffMax: 1200 * time.Millisecond})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 {
		t.Fatalf("%d attempts reached the receiver, want 3", len(bodies))
	}
	for i, b := range bodies[1:] {
		if !bytes.Equal(b, bodies[0]) {
			t.Errorf("attempt %d's body differs from the first:\n%s\n%s", i+2, b, bodies[0])
		}
	}
	var got webhook.Delivery
	if err := json.Unmarshal(bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT at FROM token_events`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if !got.Timestamp.Equal(at) || !got.Data.At.Equal(at) {
		t.Errorf("body timestamp %v, event at %v; want the event's time", got.Timestamp, at)
	}
}

// logBuffer is a slog handler's output, safe to read while a dispatcher logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEndpointDeletedMidAttempt: an operator may delete an endpoint while an
// attempt to it is in flight. Its deliveries go with it, so the attempt's
// answer has nothing left to be recorded on: that is said at INFO, not
// logged as an ERROR an operator would chase, and nothing is recorded.
func TestEndpointDeletedMidAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	ep, _, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 1)
	var logs logBuffer
	d, err := dispatch.New(dispatch.Config{Pool: pool, Keys: keys, AllowedHosts: local, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			n, err := d.Round(ctx)
			if err != nil || n > 0 {
				done <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case <-arrived:
	case <-time.After(pgtest.SettleTimeout): // a hang bound
		t.Fatal("no attempt reached the receiver")
	}
	if _, err := dispatch.Delete(ctx, pool, "a", ep.ID); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); strings.Contains(got, "level=ERROR") || !strings.Contains(got, "deleted during the attempt") {
		t.Errorf("logs:\n%s\nwant no ERROR, and a line saying the endpoint was deleted during the attempt", got)
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_attempts`); n != 0 {
		t.Errorf("%d attempts recorded for a deleted endpoint", n)
	}
}
