package httpapi_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/token"
)

// observer counts cache results by kind, e.g. "token/hit".
type observer struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *observer) ObserveCache(kind, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[kind+"/"+result]++
}

func (o *observer) ObserveBreaker(string) {}

func (o *observer) count(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[k]
}

// testRedisURL is the real Redis scripts/test provides.
// withCache gives the server a cache on url under a prefix of the test's own.
func withCache(t *testing.T, url string, obs *observer, tune func(*cache.Config)) func(*httpapi.Config) {
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	cfg := cache.Config{URL: url, Prefix: prefix, Observer: obs}
	if tune != nil {
		tune(&cfg)
	}
	c, err := cache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func(hc *httpapi.Config) { hc.Cache = c }
}

func creditBody(account string, amount int) string {
	return fmt.Sprintf(`{"operation":"ledger.credit","subject":%q,"ttl_seconds":600,"payload":{"account":%q,"amount":%d}}`, account, account, amount)
}

func consumeBody(tok issued, account string, amount int) string {
	return fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":%q,"payload":{"account":%q,"amount":%d}}`, tok.Token, account, account, amount)
}

func TestCacheServesReadsAndFollowsEveryChange(t *testing.T) {
	t.Parallel()
	obs := &observer{}
	a := newAPI(t, withCache(t, redistest.URL(), obs, nil))
	key := a.client()
	tok := a.issue(key, "cached-1", creditBody("alice", 3))

	// An issued token may still change: every read asks Postgres.
	for range 3 {
		if res := a.get(key, "/v1/tokens/"+tok.ID); res.status != http.StatusOK || !strings.Contains(string(res.body), `"state":"issued"`) {
			t.Fatalf("read: %d %s", res.status, res.body)
		}
	}
	if hits := obs.count("token/hit"); hits != 0 {
		t.Fatalf("%d cache hits for reads of an issued token, want 0", hits)
	}
	if res := a.post(key, "/v1/tokens/consume", consumeBody(tok, "alice", 3)); res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	// A consumed token never changes again: reads after the first are hits.
	for range 3 {
		if res := a.get(key, "/v1/tokens/"+tok.ID); !strings.Contains(string(res.body), `"state":"consumed"`) {
			t.Fatalf("read after spend: %s", res.body)
		}
	}
	if hits := obs.count("token/hit"); hits < 2 {
		t.Fatalf("%d cache hits for 3 reads of a consumed token, want at least 2", hits)
	}
	if res := a.post(key, "/v1/tokens/consume", consumeBody(tok, "alice", 3)); res.status != http.StatusOK || res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", res.status, res.body)
	}
	if got := a.balance("acme", "alice"); got != 3 {
		t.Fatalf("balance = %d, want 3", got)
	}
	// Redis holds no API key resolution (see cache.GetOrLoadKey).
	if hits := obs.count("apikey/hit"); hits != 0 {
		t.Fatalf("%d API key resolutions served from Redis, want 0", hits)
	}
}

// Changes made behind the cache's back, with no invalidation, are seen at
// once: an issued token is never cached. And a spend is decided in
// Postgres whatever the cache holds.
func TestCacheStaleEntryCannotDecideASpend(t *testing.T) {
	t.Parallel()
	a := newAPI(t, withCache(t, redistest.URL(), &observer{}, nil))
	ctx := context.Background()
	key, other := a.client(), a.key("globex", "client")

	consumed := a.issue(key, "stale-consumed", creditBody("bob", 4))
	revoked := a.issue(key, "stale-revoked", creditBody("bob", 4))
	for _, tok := range []issued{consumed, revoked} {
		if res := a.get(key, "/v1/tokens/"+tok.ID); !strings.Contains(string(res.body), `"state":"issued"`) {
			t.Fatalf("warm the cache: %s", res.body)
		}
	}
	// Behind the cache's back: one token is spent, the other revoked.
	spender := a.cfg.Spender
	secret, _ := token.ParseSecret(consumed.Token)
	if _, err := spender.Spend(ctx, a.pool, consume.Request{Tenant: "acme", Secret: secret, Operation: ledger.Credit, Subject: "bob", Payload: []byte(`{"account":"bob","amount":4}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Revoke(ctx, a.pool, "acme", revoked.ID, "test", "test"); err != nil {
		t.Fatal(err)
	}
	if res := a.get(key, "/v1/tokens/"+consumed.ID); !strings.Contains(string(res.body), `"state":"consumed"`) {
		t.Fatalf("read after a spend nobody invalidated: %s, want consumed", res.body)
	}
	if res := a.get(key, "/v1/tokens/"+revoked.ID); !strings.Contains(string(res.body), `"state":"revoked"`) {
		t.Fatalf("read after a revoke nobody invalidated: %s, want revoked", res.body)
	}

	// The stale "issued" does not make the consumed token spendable again...
	res := a.post(key, "/v1/tokens/consume", consumeBody(consumed, "bob", 4))
	if res.status != http.StatusOK || res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("spend of a consumed token with a stale cache: %d %s, want the replay", res.status, res.body)
	}
	// ...nor the revoked one.
	wantProblem(t, a.post(key, "/v1/tokens/consume", consumeBody(revoked, "bob", 4)), http.StatusGone, "token_revoked")
	if got := a.balance("acme", "bob"); got != 4 {
		t.Fatalf("balance = %d, want 4 (one effect)", got)
	}
	// A cached record is never served to another tenant.
	wantProblem(t, a.get(other, "/v1/tokens/"+consumed.ID), http.StatusNotFound, "token_not_found")
}

func ledgerHandlers() *consume.Registry {
	r := consume.NewRegistry()
	ledger.Register(r)
	return r
}

// redisServer is a Redis of the test's own, so it can be stopped mid-load
// without disturbing other tests.
type redisServer struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := &redisServer{t: t, addr: addr}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) start() {
	r.t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		r.t.Fatalf("redis-server not found (scripts/test installs it): %v", err)
	}
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", r.addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) stop() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Redis goes away in the middle of a concurrent spend load and comes back:
// balances are exact, no request fails because of the cache, readiness says
// degraded meanwhile, and the cache is used again afterwards.
func TestCacheRedisDownMidLoad(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	obs := &observer{}
	a := newAPI(t, withCache(t, "redis://"+rs.addr+"/0", obs, func(c *cache.Config) { c.BreakerCooldown = 100 * time.Millisecond }))
	key := a.client()

	const tokens, workers = 60, 6
	toks := make([]issued, tokens)
	for i := range toks {
		toks[i] = a.issue(key, fmt.Sprintf("load-%d", i), creditBody("carol", 1))
	}
	var (
		next      atomic.Int64
		serverErr atomic.Int64
		wg        sync.WaitGroup
		stopOnce  sync.Once
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= tokens {
					return
				}
				if i == tokens/3 {
					stopOnce.Do(rs.stop) // Redis dies a third of the way in
				}
				tok := toks[i]
				a.get(key, "/v1/tokens/"+tok.ID)
				res := a.post(key, "/v1/tokens/consume", consumeBody(tok, "carol", 1))
				if res.status >= 500 {
					serverErr.Add(1)
					t.Errorf("spend %d: %d %s", i, res.status, res.body)
				}
			}
		}()
	}
	wg.Wait()
	if n := serverErr.Load(); n != 0 {
		t.Fatalf("%d 5xx answers while Redis was down", n)
	}
	if got := a.balance("acme", "carol"); got != tokens {
		t.Fatalf("balance = %d, want %d (one credit per token)", got, tokens)
	}
	if n := a.count("ledger_entries"); n != tokens {
		t.Fatalf("%d ledger entries, want %d", n, tokens)
	}
	if obs.count("token/error")+obs.count("apikey/error") == 0 {
		t.Fatal("no Redis error was seen; Redis was not down during the load")
	}
	// Readiness reports the cache degraded while it is down, and stays 200.
	ready := a.get("", "/readyz")
	if ready.status != http.StatusOK || !strings.Contains(string(ready.body), `"redis":"degraded"`) {
		t.Fatalf("/readyz with Redis down: %d %s", ready.status, ready.body)
	}

	rs.start()
	hitsBefore := obs.count("token/hit")
	deadline := time.Now().Add(15 * time.Second)
	for obs.count("token/hit") == hitsBefore {
		if time.Now().After(deadline) {
			t.Fatal("the cache was not used again after Redis came back")
		}
		a.get(key, "/v1/tokens/"+toks[0].ID)
		time.Sleep(50 * time.Millisecond)
	}
	// Readiness follows within a probe interval (a second).
	for ready := a.get("", "/readyz"); !strings.Contains(string(ready.body), `"redis":"ok"`); ready = a.get("", "/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after Redis came back: %s", ready.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An operator's revoke or reconcile through the API drops the cached record,
// so reads show the new state at once.
func TestCacheFollowsOperatorChanges(t *testing.T) {
	t.Parallel()
	a := newAPI(t, withCache(t, redistest.URL(), &observer{}, nil))
	key, op := a.client(), a.operator()
	tok := a.issue(key, "op-change", creditBody("dora", 1))
	if res := a.get(key, "/v1/tokens/"+tok.ID); !strings.Contains(string(res.body), `"state":"issued"`) {
		t.Fatalf("warm the cache: %s", res.body)
	}
	if res := a.post(op, "/v1/admin/tokens/"+tok.ID+"/revoke", `{"reason":"test"}`); res.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", res.status, res.body)
	}
	if res := a.get(key, "/v1/tokens/"+tok.ID); !strings.Contains(string(res.body), `"state":"revoked"`) {
		t.Fatalf("read after revoke: %s, want revoked", res.body)
	}
}
