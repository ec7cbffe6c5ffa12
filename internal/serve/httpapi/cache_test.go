package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/token"
)

// A token read while issued is cached; once the database's clock passes its
// expiry, the next read says expired, though the cache entry would live on.
func TestCachedIssuedTokenExpires(t *testing.T) {
	t.Parallel()
	obs := &observer{}
	a := newAPI(t, withCache(t, redistest.URL(), obs, nil))
	key := a.client()
	tok := a.credit(key, "soon", "alice", false)
	// 5 s: both reads below must come before it, on a loaded machine too.
	a.exec(`UPDATE tokens SET expires_at = now() + interval '5 seconds' WHERE id = $1`, tok.ID)
	state := func() string {
		t.Helper()
		var v struct{ State string }
		res := a.get(key, "/v1/tokens/"+tok.ID)
		if res.status != http.StatusOK || jsonLoose(res.body, &v) != nil {
			t.Fatalf("GET: %d %s", res.status, res.body)
		}
		return v.State
	}
	if s := state(); s != "issued" {
		t.Fatalf("first read: %s, want issued", s)
	}
	// The entry was filled: without the fix, the read below is a hit.
	if s := state(); s != "issued" {
		t.Fatalf("second read: %s, want issued", s)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var past bool
		if err := a.pool.QueryRow(ctx, `SELECT expires_at <= now() FROM tokens WHERE id = $1`, tok.ID).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 3 {
		if s := state(); s != "expired" {
			t.Errorf("read %d after expiry: %s, want expired", i, s)
		}
	}
	if hits := obs.count("token/hit"); hits == 0 {
		t.Error("no read was a cache hit; the test proves nothing")
	}
}

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
	if _, err := admin.Revoke(ctx, a.pool, "acme", revoked.ID, admin.Revocation{Reason: "test", Actor: "test"}); err != nil {
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

// TestCacheTrueThroughRedisSnapshot is a Redis failover that loses the last
// writes and deletes, made deterministic: three instances share a Postgres
// and a Redis; every token and an API key are read through every instance,
// so the cache holds what it will; Redis is snapshotted (DUMP of every key);
// then tokens are spent and revoked and the key revoked, each answered, with
// every invalidation written; then Redis is served from the snapshot
// (FLUSHALL and RESTORE), as a promoted replica that missed them, or a
// restart from an old RDB, would. Every read through every instance must
// show what Postgres holds, and the revoked key must be refused.
func TestCacheTrueThroughRedisSnapshot(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	url := "redis://" + rs.addr + "/0"
	macKey := cache.MACKey([]byte("the server key every instance has"))
	withShared := func(hc *httpapi.Config) {
		c, err := cache.New(cache.Config{URL: url, Prefix: "tokend-test:", MACKey: macKey, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hc.Cache = c
	}
	pool := ledgertest.NewPool(t)
	servers := []*api{newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared)}
	key, op := servers[0].client(), servers[0].operator()

	// Tokens to spend, to revoke, to leave issued, and one already spent.
	var toSpend, toRevoke []issued
	for i := range 4 {
		toSpend = append(toSpend, servers[0].issue(key, fmt.Sprint("fo-spend-", i), creditBody("fay", 1)))
		toRevoke = append(toRevoke, servers[0].issue(key, fmt.Sprint("fo-revoke-", i), creditBody("fay", 1)))
	}
	spent := servers[0].issue(key, "fo-spent", creditBody("fay", 1))
	if res := servers[1].post(key, "/v1/tokens/consume", consumeBody(spent, "fay", 1)); res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	all := append(append(append([]issued{}, toSpend...), toRevoke...), spent)
	readAll := func(stage string) {
		t.Helper()
		for _, s := range servers {
			for _, tok := range all {
				res := s.get(key, "/v1/tokens/"+tok.ID)
				if res.status != http.StatusOK {
					t.Fatalf("%s: read %s: %d %s", stage, tok.ID, res.status, res.body)
				}
				var got struct {
					State string `json:"state"`
				}
				if err := json.Unmarshal(res.body, &got); err != nil {
					t.Fatal(err)
				}
				if want, _ := servers[0].tokenState(tok.ID); got.State != string(want) {
					t.Errorf("%s: read of %s shows %s, Postgres holds %s", stage, tok.ID, got.State, want)
				}
			}
		}
	}
	readAll("before the snapshot")

	// An API key, resolved by every instance.
	revokedKey, revokedSecret := newKey(t, servers[0])
	for _, s := range servers {
		if res := s.get(revokedSecret, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
			t.Fatalf("live key: %d %s", res.status, res.body)
		}
	}

	ctx := context.Background()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	snapshot := dumpAll(t, rdb)
	t.Logf("snapshot of %d keys", len(snapshot))

	// The changes, each answered, their invalidations written.
	for i, tok := range toSpend {
		if res := servers[i%3].post(key, "/v1/tokens/consume", consumeBody(tok, "fay", 1)); res.status != http.StatusOK {
			t.Fatalf("consume: %d %s", res.status, res.body)
		}
	}
	for i, tok := range toRevoke {
		if res := servers[i%3].post(op, "/v1/admin/tokens/"+tok.ID+"/revoke", `{"reason":"failover test"}`); res.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", res.status, res.body)
		}
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(revokedSecret))
	for _, s := range servers { // what apikey.Watch does on each instance
		s.srv.ForgetKey(ctx, h[:])
	}

	// Failover: Redis is what it was at the snapshot.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, e := range snapshot {
		if err := rdb.RestoreReplace(ctx, k, e.ttl, e.dump).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}

	readAll("after the failover")
	for _, s := range servers {
		wantProblem(t, s.get(revokedSecret, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
	}
	// One effect per spend, whatever Redis said.
	if got := servers[0].balance("acme", "fay"); got != int64(len(toSpend)+1) {
		t.Errorf("balance = %d, want %d", got, len(toSpend)+1)
	}
}

// newKey creates another client key of acme's.
func newKey(t *testing.T, a *api) (apikey.Key, string) {
	t.Helper()
	k, secret, err := apikey.Create(context.Background(), a.pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	return k, secret
}

type dumped struct {
	dump string
	ttl  time.Duration
}

// dumpAll DUMPs every key of rdb's database, with its TTL.
func dumpAll(t *testing.T, rdb *redis.Client) map[string]dumped {
	t.Helper()
	ctx := context.Background()
	out := map[string]dumped{}
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 {
			ttl = 0
		}
		out[k] = dumped{d, ttl}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCacheForgedEntryIsLoggedWithRequestID: a token entry rewritten by
// someone who can write to Redis but lacks the server key is not served;
// the request is answered from Postgres, and the warning names the
// request's id and not the planted value.
func TestCacheForgedEntryIsLoggedWithRequestID(t *testing.T) {
	t.Parallel()
	obs := &observer{}
	var logs syncBuffer
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	// LocalTTL -1: the read must reach Redis, not this process's copy.
	c, err := cache.New(cache.Config{URL: redistest.URL(), Prefix: prefix, Observer: obs, Timeout: 2 * time.Second, LocalTTL: -1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), RequestID: httpapi.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := newAPI(t, func(hc *httpapi.Config) { hc.Cache = c })
	key := a.client()
	tok := a.issue(key, "forged-1", creditBody("fred", 1))
	// Spent, so that the read caches it: only terminal tokens are cached.
	if res := a.post(key, "/v1/tokens/consume", consumeBody(tok, "fred", 1)); res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	if res := a.get(key, "/v1/tokens/"+tok.ID); res.status != http.StatusOK {
		t.Fatalf("read: %d %s", res.status, res.body)
	}

	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*tok:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("token entries under the test's prefix: %v, %v", keys, err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), keys...) })
	// Well-formed in every way but the MAC: the version matches the state,
	// the tenant and id the key's.
	planted := fmt.Sprintf(`3:{"Tenant":"acme","ID":%q,"Operation":"ledger.credit","State":"consumed","Generation":0,"Subject":"PLANTED","RetainUntil":"2999-01-01T00:00:00Z"}`, tok.ID)
	if err := rdb.Set(ctx, keys[0], planted, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	res := a.do(request{method: http.MethodGet, path: "/v1/tokens/" + tok.ID, key: key, header: http.Header{httpapi.RequestIDHeader: {"req-forged-42"}}})
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"state":"consumed"`) || strings.Contains(string(res.body), "PLANTED") {
		t.Fatalf("read after the entry was forged: %d %s, want the consumed token from Postgres", res.status, res.body)
	}
	if n := obs.count("token/forged"); n != 1 {
		t.Errorf("forged counted %d times, want 1", n)
	}
	out := logs.String()
	if !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"request_id":"req-forged-42"`) || strings.Contains(out, "PLANTED") {
		t.Errorf("want a warning with the request id and without the value, got:\n%s", out)
	}
}

// heapBound is what the README and SECURITY.md state: reading many tokens
// with large stored outcomes through GET /v1/tokens/{id} grows the live
// heap of an instance by less than this, whatever the outcomes weigh.
const heapBound = 16 << 20

// TestCacheHeapBoundedWithLargeOutcomes drives 400 tokens with ~60 KB
// outcomes each (24 MB in all) through a lease, a report and a GET with
// the cache on, then measures the live heap after a GC. The in-process
// layer keeps every terminal token it reads, so before it kept only what
// a read shows it held all 24 MB. Not parallel: the heap is the process's.
func TestCacheHeapBoundedWithLargeOutcomes(t *testing.T) {
	const tokens, outcome = 400, 60 << 10
	a := newAPI(t, withCache(t, redistest.URL(), &observer{}, nil))
	key := a.client()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.big", key: a.operator(), body: `{"mode":"lease","lease_seconds":600}`}); res.status != http.StatusOK {
		t.Fatalf("PUT operation = %d %s", res.status, res.body)
	}
	result := fmt.Sprintf(`{"generation":1,"result":{"receipt":%q}}`, strings.Repeat("r", outcome))

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range tokens {
		tok := a.issue(key, fmt.Sprint("big-", i), `{"operation":"pay.big","subject":"u","ttl_seconds":600}`)
		if res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.big","subject":"u"}`, tok.Token)); res.status != http.StatusAccepted {
			t.Fatalf("consume: %d %s", res.status, res.body)
		}
		if res := a.post(key, "/v1/tokens/"+tok.ID+"/complete", result); res.status != http.StatusOK {
			t.Fatalf("complete: %d %.200s", res.status, res.body)
		}
		if res := a.get(key, "/v1/tokens/"+tok.ID); res.status != http.StatusOK || !strings.Contains(string(res.body), `"state":"consumed"`) {
			t.Fatalf("read: %d %s", res.status, res.body)
		}
	}
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("live heap grew by %.1f MB reading %d tokens with %d KB outcomes", float64(grew)/(1<<20), tokens, outcome>>10)
	if grew > heapBound {
		t.Fatalf("live heap grew by %d bytes, want under %d", grew, heapBound)
	}
}

// slowRedis returns the address of a proxy in front of target that holds
// every reply for delay on average (from half to one and a half times
// it), as a distant or loaded Redis would.
func slowRedis(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				server, err := net.Dial("tcp", target)
				if err != nil {
					client.Close()
					return
				}
				go func() {
					_, _ = io.Copy(server, client)
					server.Close()
				}()
				type chunk struct {
					b   []byte
					due time.Time
				}
				replies := make(chan chunk, 4096)
				go func() {
					defer client.Close()
					for c := range replies {
						time.Sleep(time.Until(c.due))
						if _, err := client.Write(c.b); err != nil {
							server.Close()
							for range replies {
							}
							return
						}
					}
				}()
				var due time.Time
				buf := make([]byte, 32<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 {
						// Latency varies, as it does: some replies overtake
						// others on other connections, never on their own.
						due = later(due, time.Now().Add(delay/2+rand.N(delay)))
						replies <- chunk{bytes.Clone(buf[:n]), due}
					}
					if err != nil {
						close(replies)
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestCacheReadYourWritesAcrossInstances: two servers share a Postgres and
// a Redis whose replies take 25ms. Token reads arrive at both all along;
// meanwhile a spend is made on one of them. A read that began after the
// spend was answered, on either server, must show the token consumed.
func TestCacheReadYourWritesAcrossInstances(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + slowRedis(t, opt.Addr, 25*time.Millisecond) + "/" + strconv.Itoa(opt.DB)
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	macKey := cache.MACKey([]byte("the server key both instances have"))
	withShared := func(hc *httpapi.Config) {
		c, err := cache.New(cache.Config{URL: url, Prefix: prefix, MACKey: macKey, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hc.Cache = c
	}
	pool := ledgertest.NewPool(t)
	servers := []*api{newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared)}
	key := servers[0].client()

	const rounds = 10
	var stale, after atomic.Int64
	for round := range rounds {
		tok := servers[0].issue(key, fmt.Sprint("ryw-", round), creditBody("erin", 1))
		var answered atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						began := time.Now().UnixNano()
						res := s.get(key, "/v1/tokens/"+tok.ID)
						if res.status != http.StatusOK {
							t.Errorf("read: %d %s", res.status, res.body)
							return
						}
						if a := answered.Load(); a != 0 && began > a {
							after.Add(1)
							if !strings.Contains(string(res.body), `"state":"consumed"`) {
								stale.Add(1)
							}
						}
					}()
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		if res := servers[round%2].post(key, "/v1/tokens/consume", consumeBody(tok, "erin", 1)); res.status != http.StatusOK {
			t.Fatalf("spend: %d %s", res.status, res.body)
		}
		answered.Store(time.Now().UnixNano())
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
	if after.Load() < rounds {
		t.Fatalf("only %d reads began after a spend was answered; the test proves nothing", after.Load())
	}
	if n := stale.Load(); n != 0 {
		t.Fatalf("%d of %d reads begun after the spend was answered showed the token before it", n, after.Load())
	}
	if got := servers[0].balance("acme", "erin"); got != rounds {
		t.Fatalf("balance = %d, want %d", got, rounds)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// watchRevocations wires apikey.Watch to the server as cmd/tokend does and
// returns a channel that receives each revoked key's hash once ForgetKey
// has returned for it. It returns once Watch listens.
func (a *api) watchRevocations() <-chan []byte {
	a.t.Helper()
	forgotten := make(chan []byte, 16)
	listening := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- apikey.Watch(ctx, a.pool,
			func(h []byte) { a.srv.ForgetKey(ctx, h); forgotten <- h },
			func() { a.srv.ForgetAllKeys(); listening <- struct{}{} },
			slog.New(slog.DiscardHandler))
	}()
	a.t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			a.t.Errorf("Watch = %v, want context.Canceled", err)
		}
	})
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		a.t.Fatal("Watch not listening after 10s")
	}
	return forgotten
}

// A key revoked by any process is refused at the next request, however long
// its resolution would otherwise be cached, in process or in Redis.
func TestRevocationReachesEveryCache(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		configure func(t *testing.T) func(*httpapi.Config)
	}{
		{"in process", func(*testing.T) func(*httpapi.Config) {
			return func(c *httpapi.Config) { c.KeyCacheTTL = time.Hour }
		}},
		{"redis and in process", func(t *testing.T) func(*httpapi.Config) {
			withRedis := withCache(t, redistest.URL(), &observer{}, func(c *cache.Config) { c.KeyTTL = time.Hour })
			return func(c *httpapi.Config) { withRedis(c); c.KeyCacheTTL = time.Hour }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, tt.configure(t))
			forgotten := a.watchRevocations()
			key, id := a.client(), a.keyIDs["acme/client"]
			if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Fatalf("live key: %d %s", res.status, res.body)
			}

			// Control: a revocation nobody is told of leaves the cached key
			// working, so what refuses it below is the broadcast.
			if _, err := a.pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Fatalf("revoked without a word: %d %s; want 200 from the cache (is the cache on?)", res.status, res.body)
			}

			// As `tokend keys revoke` without TOKEND_REDIS_URL does: nothing
			// but Postgres hears of it.
			if _, err := apikey.Revoke(t.Context(), a.pool, "acme", id); err != nil {
				t.Fatal(err)
			}
			select {
			case h := <-forgotten:
				if want := sha256.Sum256([]byte(key)); !bytes.Equal(h, want[:]) {
					t.Fatalf("forgot key hash %x, want %x", h, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the revocation was not heard within 10s")
			}
			wantProblem(t, a.get(key, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
			// Other keys are untouched.
			if res := a.get(a.operator(), "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Errorf("another key after the revocation: %d %s", res.status, res.body)
			}
		})
	}
}
