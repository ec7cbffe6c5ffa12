package dispatch_test

import (
	"context"
	"fmt"
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
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// hanger is a receiver that accepts and never answers until released,
// counting what each tenant (the first path segment) has in flight.
type hanger struct {
	srv      *httptest.Server
	release  chan struct{}
	mu       sync.Mutex
	now      map[string]int // tenant → in flight
	most     map[string]int // tenant → most in flight at once
	total    int
	mostAll  int
	received map[string]int // endpoint path and event id → times received
}

func newHanger(t *testing.T) *hanger {
	h := &hanger{release: make(chan struct{}), now: map[string]int{}, most: map[string]int{}, received: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]
		h.mu.Lock()
		h.now[tenant]++
		h.most[tenant] = max(h.most[tenant], h.now[tenant])
		h.total++
		h.mostAll = max(h.mostAll, h.total)
		h.received[r.URL.Path+" "+r.Header.Get("webhook-id")]++
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.now[tenant]--
			h.total--
			h.mu.Unlock()
		}()
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(h.release)
		h.srv.Close()
	})
	return h
}

// inFlight answers what is in flight now, in all and for tenant.
func (h *hanger) inFlight(tenant string) (all, of int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total, h.now[tenant]
}

func (h *hanger) mostOf(tenant string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most[tenant]
}

func (h *hanger) mostInAll() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mostAll
}

func (h *hanger) duplicates() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var d []string
	for k, n := range h.received {
		if n > 1 {
			d = append(d, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	return d
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pgtest.SettleTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v", what, pgtest.SettleTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangingConfig is a dispatcher whose attempts to a hanging endpoint last
// the whole test.
func hangingConfig(pool *pgxpool.Pool, workers int) dispatch.Config {
	return dispatch.Config{Pool: pool, Keys: nil, Timeout: 5 * time.Minute, Lease: 10 * time.Minute,
		Interval: 10 * time.Millisecond, Workers: workers}
}

// TestHostileTenantsHoldOnlyTheirShares: six tenants whose endpoints hang
// fill what their shares of a dispatcher of 8 workers let them; a healthy
// tenant whose events come after gets every delivery applied while their
// attempts are still in flight (one of them preempted when hostile
// newcomers took the reserve). TestSharesNeverGiveMoreThanTheShare checks
// the shares themselves.
func TestHostileTenantsHoldOnlyTheirShares(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	h := newHanger(t)
	const hostile = 6
	for i := range hostile {
		tenant := fmt.Sprintf("h%d", i)
		for e := range 2 {
			if _, _, err := dispatch.Create(ctx, pool, keys, local, tenant, dispatch.NewEndpoint{URL: fmt.Sprintf("%s/%s/%d", h.srv.URL, tenant, e)}); err != nil {
				t.Fatal(err)
			}
		}
		writeEvents(t, pool, tenant, 10)
	}
	ok := newConsumer(t, pool)
	_, secret, err := dispatch.Create(ctx, pool, keys, local, "ok", dispatch.NewEndpoint{URL: ok.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ok.secret.Store(secret)
	cfg := hangingConfig(pool, 8)
	cfg.Keys = keys
	d := newDispatcher(t, cfg)
	go func() { _ = d.Run(ctx) }()
	// 8 workers less the reserve of 1: what the hostile tenants' shares
	// let them fill.
	waitFor(t, "the hostile tenants hold 7 attempts", func() bool { all, _ := h.inFlight(""); return all >= 7 })
	writeEvents(t, pool, "ok", 20)
	waitFor(t, "the healthy tenant's 20 deliveries applied", func() bool { return ok.effects() == 20 })
	if all, _ := h.inFlight(""); all == 0 {
		t.Errorf("no hostile attempt in flight once the healthy tenant was served, want them still hanging")
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id <> 'ok' AND leased_until > now()`); n > 8 {
		t.Errorf("%d hostile deliveries leased, want at most the 8 workers", n)
	}
}

// TestFailingEndpointsShareAQuarter: endpoints that failed their last
// attempt and now hang get one attempt in flight each and a quarter of the
// workers between them, however many tenants own them.
func TestFailingEndpointsShareAQuarter(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	h := newHanger(t)
	for i := range 6 {
		tenant := fmt.Sprintf("f%d", i)
		for e := range 2 {
			if _, _, err := dispatch.Create(ctx, pool, keys, local, tenant, dispatch.NewEndpoint{URL: fmt.Sprintf("%s/%s/%d", h.srv.URL, tenant, e)}); err != nil {
				t.Fatal(err)
			}
		}
		writeEvents(t, pool, tenant, 10)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	cfg := hangingConfig(pool, 16)
	cfg.Keys = keys
	d := newDispatcher(t, cfg)
	go func() { _ = d.Run(ctx) }()
	waitFor(t, "four failing endpoints tried", func() bool { all, _ := h.inFlight(""); return all >= 4 })
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE leased_until > now()`); n != 4 {
		t.Errorf("%d deliveries leased to failing endpoints, want 16/4 = 4", n)
	}
	if h.mostInAll() > 4 {
		t.Errorf("%d attempts to failing endpoints at once, want at most 4", h.mostInAll())
	}
	if n := count(t, pool, `SELECT max(c) FROM (SELECT count(*) AS c FROM webhook_deliveries WHERE leased_until > now() GROUP BY endpoint_id) x`); n != 1 {
		t.Errorf("a failing endpoint has %d attempts in flight, want 1", n)
	}
}

// TestLeasesSurviveDisableAndEnable: a tenant at its cap that disables and
// enables its endpoints while their attempts hang gets no more attempts:
// each in flight counts until it ends, and none is sent twice.
func TestLeasesSurviveDisableAndEnable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	h := newHanger(t)
	var eps []dispatch.Endpoint
	for e := range 2 {
		ep, _, err := dispatch.Create(ctx, pool, keys, local, "a", dispatch.NewEndpoint{URL: fmt.Sprintf("%s/a/%d", h.srv.URL, e)})
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, ep)
	}
	writeEvents(t, pool, "a", 6)
	cfg := hangingConfig(pool, 16)
	cfg.Keys, cfg.EndpointConcurrency, cfg.TenantConcurrency = keys, 2, 2
	d := newDispatcher(t, cfg)
	go func() { _ = d.Run(ctx) }()
	waitFor(t, "the tenant at its cap", func() bool { _, n := h.inFlight("a"); return n == 2 })
	other := newDispatcher(t, cfg)
	for _, step := range []struct {
		ep int
		on bool
	}{{0, false}, {1, false}, {0, true}, {1, true}} {
		if _, err := dispatch.SetEnabled(ctx, pool, "a", eps[step.ep].ID, step.on); err != nil {
			t.Fatal(err)
		}
		n, err := dispatch.ClaimOnly(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("after setting endpoint %d enabled=%v, another dispatcher claimed %d more for a tenant at its cap of 2", step.ep, step.on, n)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE leased_until > now()`); n != 2 {
		t.Errorf("%d deliveries leased, want the 2 in flight", n)
	}
	if _, n := h.inFlight("a"); n != 2 || h.mostOf("a") != 2 {
		t.Errorf("%d attempts in flight (%d at most), want 2", n, h.mostOf("a"))
	}
	if d := h.duplicates(); len(d) > 0 {
		t.Errorf("sent twice: %v", d)
	}
}

// TestDisabledEndpointOwesWhatIsWrittenMeanwhile: events written while an
// endpoint is disabled become parked deliveries: its record and
// tokend_webhook_parked show them owed, they are not lag, and enabling it
// delivers them.
func TestDisabledEndpointOwesWhatIsWrittenMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, keys, c, ep := hooked(t, false, "")
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	writeEvents(t, pool, "a", 3)
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID) == 3
	})
	ds, err := dispatch.Recent(ctx, pool, "a", ep.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 {
		t.Errorf("the record shows %d deliveries, want the 3 owed", len(ds))
	}
	for _, x := range ds {
		if x.State != "parked" || x.Attempts != 0 {
			t.Errorf("delivery %d: %s after %d attempts, want parked, untried", x.Position, x.State, x.Attempts)
		}
	}
	m := gather(t, d)
	if m["tokend_webhook_parked"] != 3 || m["tokend_webhook_undelivered"] != 0 {
		t.Errorf("metrics %v, want 3 parked, 0 undelivered", m)
	}
	if c.got.Load() != 0 {
		t.Errorf("a disabled endpoint was sent %d deliveries", c.got.Load())
	}
	if _, err := dispatch.SetEnabled(ctx, pool, "a", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	until(t, d, func() bool { return c.effects() == 3 })
}

// statements counts the statements and batches a pool sends.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestIdleRoundCostsNoStatementPerTenant: with 40 webhook tenants and
// nothing to deliver, a round sends a handful of statements (one batch for
// every tenant's feed), not a transaction per tenant, and takes no lock.
func TestIdleRoundCostsNoStatementPerTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	var st statements
	cfg.ConnConfig.Tracer = &st
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	keys := keyring(t)
	const tenants = 40
	for i := range tenants {
		tenant := fmt.Sprintf("t%02d", i)
		if _, _, err := dispatch.Create(ctx, pool, keys, local, tenant, dispatch.NewEndpoint{URL: "http://127.0.0.1:1/" + tenant}); err != nil {
			t.Fatal(err)
		}
		writeEvents(t, pool, tenant, 1)
	}
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys, BackoffBase: time.Hour, BackoffMax: time.Hour})
	// Rounds position, fan out and try every delivery once; then each
	// backs off for an hour and nothing is due. How many rounds that takes
	// depends on the server: an event is positioned only once every older
	// transaction on it has ended, other tests' too.
	until(t, d, func() bool {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries
			WHERE attempts >= 1 AND leased_until IS NULL AND next_attempt_at > now() + interval '20 minutes'`) == tenants
	})
	before := st.n.Load()
	const rounds = 5
	for range rounds {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if per := (st.n.Load() - before) / rounds; per > 6 {
		t.Errorf("an idle round sent %d statements for %d tenants, want a few whatever the tenants", per, tenants)
	}
}

// TestClaimSkipsATenantWhoseRowsAreLocked: while an operator's statement
// holds a lock on tenant a's deliveries, a claim skips a and claims b's
// instead of waiting behind it with the claim lock held.
func TestClaimSkipsATenantWhoseRowsAreLocked(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		// The claim's lock_timeout, set in its savepoint on the
		// coordinator, does not bound the wait on the worker holding the
		// rows: docs/webhooks.md says so.
		t.Skip("on Citus a tenant's locked rows still hold its claim until they are released")
	}
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	for _, tenant := range []string{"a", "b"} {
		if _, _, err := dispatch.Create(ctx, pool, keys, local, tenant, dispatch.NewEndpoint{URL: "http://127.0.0.1:1/" + tenant}); err != nil {
			t.Fatal(err)
		}
		writeEvents(t, pool, tenant, 3)
	}
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	waitFor(t, "both tenants' deliveries made", func() bool {
		if err := dispatch.FanOutOnly(ctx, d); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries`) == 6
	})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_deliveries WHERE tenant_id = 'a' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, err := dispatch.ClaimOnly(cctx, d)
	if err != nil {
		t.Fatalf("claim with a's rows locked: %v", err)
	}
	if n != 3 {
		t.Errorf("claimed %d, want b's 3", n)
	}
	if got := count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = 'b' AND attempts = 1`); got != 3 {
		t.Errorf("%d of b's deliveries leased, want 3", got)
	}
}

// TestClaimsOfOtherTenantsDoNotWait: while another instance holds tenant
// a's claim (a slow claim of a large backlog, say), a claim of tenant b on
// this instance neither waits for it nor claims a's deliveries; a's are
// claimed once that claim ends. Before, one lock for the whole database
// serialized every claim of every instance, so a slow claim of one tenant
// held every tenant's deliveries on every other instance. An instance of
// the previous release, which takes that lock exclusively, still excludes
// this release's claims during an upgrade.
func TestClaimsOfOtherTenantsDoNotWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	keys := keyring(t)
	for _, tenant := range []string{"a", "b"} {
		if _, _, err := dispatch.Create(ctx, pool, keys, local, tenant, dispatch.NewEndpoint{URL: "http://127.0.0.1:1/" + tenant}); err != nil {
			t.Fatal(err)
		}
		writeEvents(t, pool, tenant, 3)
	}
	d := newDispatcher(t, dispatch.Config{Pool: pool, Keys: keys})
	waitFor(t, "both tenants' deliveries made", func() bool {
		if err := dispatch.FanOutOnly(ctx, d); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries`) == 6
	})
	leased := func(tenant string) int64 {
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1 AND attempts = 1`, tenant)
	}

	other, err := pool.Begin(ctx) // another instance, claiming a
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if got, err := store.ClaimLock(ctx, other, "a"); err != nil || !got {
		t.Fatalf("a's claim lock: %v, %v", got, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second) // a hang fails, it is not measured
	defer cancel()
	if n, err := dispatch.ClaimOnly(cctx, d); err != nil || n != 3 {
		t.Fatalf("claim while another instance claims a: %d, %v; want b's 3", n, err)
	}
	if a, b := leased("a"), leased("b"); a != 0 || b != 3 {
		t.Errorf("leased a %d, b %d; want 0 (left to the instance claiming a) and 3", a, b)
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := dispatch.ClaimOnly(cctx, d); err != nil || n != 3 || leased("a") != 3 {
		t.Errorf("claim once a's is over: %d, %v, a leased %d; want a's 3", n, err, leased("a"))
	}

	// A previous release's claim: the database's one claim lock, exclusive.
	writeEvents(t, pool, "b", 1)
	waitFor(t, "b's new delivery made", func() bool {
		if err := dispatch.FanOutOnly(ctx, d); err != nil {
			t.Fatal(err)
		}
		return count(t, pool, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = 'b'`) == 4
	})
	old, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Rollback(ctx) }()
	if _, err := old.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('tokend.webhooks.claim', 0))`); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		n, err := dispatch.ClaimOnly(cctx, d)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	waitFor(t, "the claim waiting for the previous release's", func() bool {
		return count(t, pool, `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 1
	})
	if b := leased("b"); b != 3 {
		t.Errorf("b's 4th delivery leased while a previous release's claim held the lock: %d leased", b)
	}
	if err := old.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 1 || leased("b") != 4 {
		t.Errorf("claim after the previous release's: %d, b leased %d; want 1, 4", n, leased("b"))
	}
}
