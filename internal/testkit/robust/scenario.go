package robust

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/testkit/pgcluster"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/migrations"
)

// Scenario is one fault on a deployment of tokend under traffic.
type Scenario struct {
	Name      string
	Instances int
	Fault     Fault
	// Front, if set, stands between the clients and each instance: a
	// deliberately broken layer, for tests that the checker catches what
	// it breaks. It returns the URL to send to instead of upstream.
	Front func(t testing.TB, upstream string) string
	// HookFront, if set, stands between tokend's dispatchers and the
	// webhook receiver, as Front does before the instances.
	HookFront func(t testing.TB, upstream string) string
	// Neighbours adds another database's load on the same Postgres server
	// (short transactions, and some held open up to 1.5 s), as a shared
	// server has.
	Neighbours bool
}

// Fault is a nemesis: Inject breaks something and heals it (or leaves
// the healing to the next round), every Every on average.
type Fault struct {
	Name      string
	Proxy     bool // tokend reaches Postgres through a Proxy
	PgBouncer bool // tokend reaches Postgres through a PgBouncer of the kit's own
	// Webhooks registers an endpoint on a Receiver of the kit's own before
	// the traffic starts, and checks after it that every event of the feed
	// was delivered (answered 2xx) at least once, and nothing else.
	Webhooks bool
	// Sweep is TOKEND_SWEEP_INTERVAL (default 1s); Expiring the percent
	// of issues with a TTL of 1–2 s (default 15); ShortLeases adds a lease
	// operation of 1 s whose holders now and then vanish without a report,
	// leaving the sweeper to lapse the lease.
	Sweep       time.Duration
	Expiring    int
	ShortLeases bool
	// Env is extra environment for every instance; BuildTags the build
	// they run (proctest.Options.BuildTags).
	Env       []string
	BuildTags string
	// Aimed: each kill waits for its target (a sweep round, a delivery in
	// flight); a run where none landed fails.
	Aimed  bool
	Every  time.Duration
	Inject func(ctx context.Context, e *Env, r *rand.Rand) error
}

// Env is a running deployment: Postgres, Redis, the proxy, the instances.
type Env struct {
	T       testing.TB
	DBURL   string // the database, straight (keys, effects)
	PG      *pgcluster.Cluster
	Proxy   *Proxy
	Bouncer *PgBouncer
	Hooks   *Receiver
	Redis   *RedisServer
	Servers []*proctest.Server

	mu    sync.Mutex
	down  map[int]bool // instances stopped by a fault and not yet restarted
	snap  string       // the Redis snapshot an old-snapshot fault restores
	env   []string     // every instance's extra environment
	count atomic.Int64 // faults injected
	aimed atomic.Int64 // kills that hit what the fault aims at (a sweep round, a delivery)
}

// Seed is TOKEND_ROBUSTNESS_SEED, else one drawn now; t logs it so a failing
// run can be repeated (the traffic's and the faults' random choices; the
// machine's timing is not repeatable).
func Seed(t testing.TB) uint64 {
	if s := os.Getenv("TOKEND_ROBUSTNESS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TOKEND_ROBUSTNESS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func seedFor(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

// Run sets up sc, runs traffic with sc's fault for d, heals everything,
// and checks the history, the feed and the ledger. It fails t with the
// checker's report and the seed.
func Run(t *testing.T, sc Scenario, d time.Duration, seed uint64) {
	res := run(t, sc, d, seed)
	if !res.OK() {
		t.Errorf("scenario %s (seed %d) failed the check:\n%s", sc.Name, seed, res.Report())
	}
}

func run(t *testing.T, sc Scenario, d time.Duration, seed uint64) Result {
	t.Logf("scenario %s, %d instance(s), %v of traffic, seed %d (rerun with TOKEND_ROBUSTNESS_SEED=%d)", sc.Name, sc.Instances, d, seed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	e := setup(ctx, t, sc)
	tenant := "robust-" + strings.ReplaceAll(sc.Name, "/", "-")
	key := proctest.CreateKey(t, e.DBURL, tenant, "client")
	op := proctest.CreateKey(t, e.DBURL, tenant, "operator")
	urls := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		urls[i] = s.URL
		if sc.Front != nil {
			urls[i] = sc.Front(t, s.URL)
		}
	}
	declareLease(ctx, t, urls[0], op, leaseOperation, 3600)
	if sc.Fault.ShortLeases {
		declareLease(ctx, t, urls[0], op, shortLeaseOperation, 1)
	}
	if sc.Fault.Webhooks {
		hookURL := e.Hooks.URL()
		if sc.HookFront != nil {
			hookURL = sc.HookFront(t, hookURL)
		}
		e.Hooks.Register(ctx, t, urls[0], op, hookURL)
	}

	h := NewHistory()
	tr := &Traffic{Prefix: "i", Expiring: sc.Fault.Expiring, ShortLeases: sc.Fault.ShortLeases}
	var notSent atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var wg sync.WaitGroup
	clients := 4 + 2*sc.Instances
	for i := range clients {
		c := &Client{ID: i, URLs: urls, Key: key, Operator: op, History: h, NotSent: &notSent,
			HTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
			Rand: rand.New(rand.NewPCG(seedFor(seed, sc.Name), uint64(i)))}
		wg.Go(func() { tr.Run(runCtx, c) })
	}
	if sc.Neighbours {
		r := rand.New(rand.NewPCG(seedFor(seed, sc.Name), 1<<33))
		wg.Go(func() {
			if err := neighbours(runCtx, e, r); err != nil && runCtx.Err() == nil {
				t.Errorf("neighbours: %v", err)
			}
		})
	}
	if sc.Fault.Inject != nil {
		r := rand.New(rand.NewPCG(seedFor(seed, sc.Name), 1<<32))
		wg.Go(func() {
			for {
				wait := sc.Fault.Every/2 + time.Duration(r.Int64N(int64(sc.Fault.Every)))
				select {
				case <-runCtx.Done():
					return
				case <-time.After(wait):
				}
				if err := sc.Fault.Inject(runCtx, e, r); err != nil && runCtx.Err() == nil {
					t.Errorf("fault %s: %v", sc.Fault.Name, err)
				}
				e.count.Add(1)
			}
		})
	}
	wg.Wait()
	e.heal(ctx)

	ops := h.Operations()
	feed := readFeed(ctx, t, urls[0], key, e.DBURL, tenant)
	led := readLedger(ctx, t, e.DBURL, tenant)
	res := Check(ops, Observed{Feed: feed, Ledger: led, Tokens: readTokens(ctx, t, e.DBURL, tenant)}, artifactDir(t))
	expired, unknown := 0, 0
	for _, ev := range feed {
		switch {
		case ev.To == "expired":
			expired++
		case ev.From == "pending" && ev.To == "unknown":
			unknown++
		}
	}
	t.Logf("%s: %d faults injected; %s; %d events in the feed (%d expiries, %d pending->unknown: reported or lapsed); %d requests refused at connect (not recorded)",
		sc.Name, e.count.Load(), summarize(ops), len(feed), expired, unknown, notSent.Load())
	if e.Hooks != nil {
		res.Problems = append(res.Problems, e.Hooks.Check(ctx, t, func() []Event { return readFeed(ctx, t, urls[0], key, e.DBURL, tenant) })...)
	}
	if sc.Fault.Inject != nil && e.count.Load() == 0 {
		t.Errorf("no fault was injected in %v: this run proved nothing about %s", d, sc.Fault.Name)
	}
	if sc.Fault.Aimed {
		t.Logf("%s: %d of %d kills landed on what they aim at", sc.Name, e.aimed.Load(), e.count.Load())
		if e.aimed.Load() == 0 {
			t.Errorf("no kill landed on what %s aims at in %v: this run proved nothing about it", sc.Fault.Name, d)
		}
	}
	return res
}

// artifactDir is TOKEND_ROBUSTNESS_ARTIFACTS, else a directory of t's own.
func artifactDir(t testing.TB) string {
	if d := os.Getenv("TOKEND_ROBUSTNESS_ARTIFACTS"); d != "" {
		return d
	}
	return t.TempDir()
}

func summarize(ops []porcupine.Operation) string {
	byKind := map[Kind]int{}
	unknown := 0
	why := map[string]int{}
	for _, op := range ops {
		byKind[op.Input.(Input).Kind]++
		if out := op.Output.(Output); out.Unknown {
			unknown++
			why[out.Err]++
		}
	}
	var reasons []string
	for _, w := range slices.Sorted(maps.Keys(why)) {
		reasons = append(reasons, fmt.Sprintf("%d× %s", why[w], w))
	}
	var parts []string
	for _, k := range []Kind{KindIssue, KindSpend, KindGet, KindList, KindRevoke, KindComplete, KindFail, KindUnknown, KindReconcile} {
		parts = append(parts, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	return fmt.Sprintf("%d requests (%s), %d with an unknown outcome [%s]", len(ops), strings.Join(parts, ", "), unknown, strings.Join(reasons, "; "))
}

func setup(ctx context.Context, t *testing.T, sc Scenario) *Env {
	e := &Env{T: t, down: map[int]bool{}}
	// Every scenario has a Postgres server of its own, restarted or not:
	// the feed positions an event only once every older transaction on
	// the server has ended, and on a shared server another test's long
	// transaction would hold it back for minutes.
	// TOKEND_ROBUSTNESS_SHARED_PG=1 puts the scenarios that restart no
	// Postgres on the shared server instead (pgtest), whose other load is
	// what track record #1 needed to show.
	if os.Getenv("TOKEND_ROBUSTNESS_SHARED_PG") == "1" && !strings.HasPrefix(sc.Fault.Name, "pg-") && !sc.Fault.PgBouncer {
		e.DBURL = pgtest.NewURL(t)
	} else {
		e.PG = pgcluster.Start(t)
		e.DBURL = e.PG.URL("postgres")
		if _, err := migrations.ApplyURLCount(ctx, e.DBURL, migrations.Schema, ledger.Migrations); err != nil {
			t.Fatal(err)
		}
	}
	tokendURL := e.DBURL
	env := []string{"TOKEND_SWEEP_INTERVAL=" + cmp.Or(sc.Fault.Sweep, time.Second).String()}
	if sc.Fault.PgBouncer {
		if e.PG == nil {
			t.Fatal("a PgBouncer scenario needs a cluster of its own")
		}
		e.Bouncer = StartPgBouncer(t, fmt.Sprintf("127.0.0.1:%d", e.PG.Port))
		u, err := url.Parse(e.DBURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = e.Bouncer.Addr()
		tokendURL = u.String()
		// As behind a production PgBouncer: sessions (migrations, LISTEN)
		// go straight to Postgres.
		env = append(env, "TOKEND_DATABASE_POOLING=transaction", "TOKEND_DATABASE_SESSION_URL="+e.DBURL)
	}
	if sc.Fault.Webhooks {
		e.Hooks = StartReceiver(t)
		// Deliveries go to loopback; a dispatcher's lease on one is 3 s.
		env = append(env, "TOKEND_WEBHOOK_ALLOWED_HOSTS=127.0.0.1", "TOKEND_WEBHOOK_TIMEOUT=1s")
	}
	if sc.Fault.Proxy {
		u, err := url.Parse(e.DBURL)
		if err != nil {
			t.Fatal(err)
		}
		e.Proxy = StartProxy(t, u.Host)
		u.Host = e.Proxy.Addr()
		tokendURL = u.String()
	}
	redisURL := ""
	if _, err := exec.LookPath("redis-server"); err == nil {
		e.Redis = StartRedis(t)
		redisURL = e.Redis.URL()
	} else if strings.HasPrefix(sc.Fault.Name, "redis") {
		t.Skip("no redis-server on PATH")
	}
	// TOKEND_DATABASE_URL is given explicitly: proctest's own routing
	// (through the deployment pass's PgBouncer) is for the shared server.
	env = append(append(env, "TOKEND_DATABASE_URL="+tokendURL), sc.Fault.Env...)
	e.env = env
	for range sc.Instances {
		e.Servers = append(e.Servers, proctest.Start(t, proctest.Options{DatabaseURL: tokendURL, RedisURL: redisURL, Env: env,
			BuildTags: sc.Fault.BuildTags}))
	}
	return e
}

// heal ends every fault still on and restarts what a fault left down.
func (e *Env) heal(ctx context.Context) {
	if e.Proxy != nil {
		e.Proxy.Blackhole(false)
		e.Proxy.SetLatency(0)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.down {
		e.Servers[i].Restart()
		delete(e.down, i)
	}
}

func declareLease(ctx context.Context, t testing.TB, base, op, name string, leaseSeconds int) {
	body := fmt.Sprintf(`{"mode":"lease","on_lease_expiry":"unknown","lease_seconds":%d,"max_ttl_seconds":3600,"retention_seconds":86400}`, leaseSeconds)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/v1/admin/operations/"+name, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+op)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 201 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("declare %s: %d %s", name, resp.StatusCode, b)
	}
}

// readFeed reads the tenant's whole feed, again until it holds as many
// events as the database wrote (events are positioned once older
// transactions end), for at most pgtest.SettleTimeout.
func readFeed(ctx context.Context, t testing.TB, base, key, dbURL, tenant string) []Event {
	deadline := time.Now().Add(pgtest.SettleTimeout)
	last := -1
	for {
		feed, err := readFeedOnce(ctx, base, key)
		written, unpositioned := countEvents(ctx, t, dbURL, tenant)
		if err == nil && len(feed) >= written {
			return feed
		}
		// Every event positioned, twice the same count short of what was
		// written: the feed lost events, and the check says which.
		if err == nil && unpositioned == 0 && len(feed) == last {
			t.Logf("the feed holds %d events, every one of the %d the database wrote is positioned", len(feed), written)
			return feed
		}
		if err == nil {
			last = len(feed)
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("read the feed: %v", err)
			}
			t.Fatalf("the feed holds %d events after %v, the database wrote %d, %d of them still unpositioned: the feed did not settle, nothing to check",
				len(feed), pgtest.SettleTimeout, written, unpositioned)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readFeedOnce(ctx context.Context, base, key string) ([]Event, error) {
	var all []Event
	after := ""
	for {
		u := base + "/v1/events?limit=500"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			Items []struct {
				ID       string  `json:"id"`
				Position int64   `json:"position"`
				TokenID  string  `json:"token_id"`
				From     *string `json:"from_state"`
				To       string  `json:"to_state"`
				Gen      int64   `json:"generation"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("GET /v1/events: %d", resp.StatusCode)
		}
		if err != nil {
			return nil, err
		}
		if len(page.Items) == 0 {
			return all, nil
		}
		for _, it := range page.Items {
			ev := Event{ID: it.ID, Position: it.Position, TokenID: it.TokenID, To: it.To, Generation: it.Gen}
			if it.From != nil {
				ev.From = *it.From
			}
			all = append(all, ev)
		}
		after = page.NextCursor
	}
}

// countEvents is how many events the tenant's tokens wrote, and how many
// of them wait for a position.
func countEvents(ctx context.Context, t testing.TB, dbURL, tenant string) (written, unpositioned int) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var positioned int
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM token_events WHERE tenant_id = $1),
		(SELECT count(*) FROM event_positions WHERE tenant_id = $1)`, tenant).Scan(&written, &positioned)
	unpositioned = written - positioned
	if err != nil {
		t.Fatalf("count events: %v", err)
	}
	return written, unpositioned
}

func readLedger(ctx context.Context, t testing.TB, dbURL, tenant string) map[string]int64 {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT account, balance FROM ledger_accounts WHERE tenant_id = $1", tenant)
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	led := map[string]int64{}
	for rows.Next() {
		var a string
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			t.Fatalf("read ledger: %v", err)
		}
		led[a] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	return led
}

// readTokens maps the tenant's token ids to their intent IDs.
func readTokens(ctx context.Context, t testing.TB, dbURL, tenant string) map[string]string {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT id, intent_id FROM tokens WHERE tenant_id = $1", tenant)
	if err != nil {
		t.Fatalf("read tokens: %v", err)
	}
	m := map[string]string{}
	for rows.Next() {
		var id, intent string
		if err := rows.Scan(&id, &intent); err != nil {
			t.Fatalf("read tokens: %v", err)
		}
		m[id] = intent
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read tokens: %v", err)
	}
	return m
}
