package cache

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/token"
)

// testTimeout replaces DefaultTimeout in tests: under -race on a busy
// machine 50ms is not always enough, and a test must not fail because the
// breaker opened on a slow scheduler.
const testTimeout = 2 * time.Second

// backend is a Redis a test can run against.
type backend struct {
	name string
	// open returns a Cache on this backend configured by cfg (URL, Prefix
	// and Observer are filled in) and the recorder observing it.
	open func(t testing.TB, cfg Config) (*Cache, *recorder)
}

// backends are miniredis and the real Redis at TOKEND_TEST_REDIS_URL:
// miniredis for its clock, the real one for real Lua.
var backends = []backend{
	{"miniredis", func(t testing.TB, cfg Config) (*Cache, *recorder) {
		c, _, rec := openMini(t, cfg)
		return c, rec
	}},
	{"redis", openReal},
}

// openMini returns a Cache on a fresh miniredis.
func openMini(t testing.TB, cfg Config) (*Cache, *miniredis.Miniredis, *recorder) {
	t.Helper()
	mr := redistest.Mini(t)
	cfg.URL = "redis://" + mr.Addr()
	c, rec := open(t, cfg)
	return c, mr, rec
}

// openReal returns a Cache on the real Redis, under a key prefix of its
// own that is cleaned up when t ends. An unreachable Redis fails the test:
// scripts/test guarantees one.
func openReal(t testing.TB, cfg Config) (*Cache, *recorder) {
	t.Helper()
	cfg.URL, cfg.Prefix = redistest.URL(), redistest.Prefix(t, "cache")
	return open(t, cfg)
}

func open(t testing.TB, cfg Config) (*Cache, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Observer = rec
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rec
}

// recorder is an Observer that remembers what it was told.
type recorder struct {
	mu     sync.Mutex
	counts map[[2]string]int
	states []string
}

func (r *recorder) ObserveCache(kind, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[[2]string]int{}
	}
	r.counts[[2]string{kind, result}]++
}

func (r *recorder) ObserveBreaker(state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, state)
}

func (r *recorder) count(kind, result string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[[2]string{kind, result}]
}

func (r *recorder) breakerStates() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.states...)
}

// db stands in for Postgres: the committed rows, and a count of loads.
type db struct {
	mu    sync.Mutex
	rows  map[string]token.Record // by tenant and id
	loads atomic.Int64
}

func newDB(recs ...token.Record) *db {
	d := &db{rows: map[string]token.Record{}}
	for _, r := range recs {
		d.commit(r)
	}
	return d
}

func (d *db) commit(r token.Record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rows[r.Tenant+"/"+r.ID] = r
}

// loader returns the load function GetOrLoad wants for tenant's token id.
func (d *db) loader(tenant, id string) func(context.Context) (token.Record, error) {
	return func(context.Context) (token.Record, error) {
		d.loads.Add(1)
		d.mu.Lock()
		defer d.mu.Unlock()
		r, ok := d.rows[tenant+"/"+id]
		if !ok {
			return token.Record{}, token.ErrNotFound
		}
		return r, nil
	}
}

// record returns a consumed token of tenant (only tokens in a terminal
// state are cached: see settled), created a moment ago, with every field
// the cache keeps set (see shown), so that a round trip through the cache
// that loses one shows. withOutcome adds the fields the cache must not
// keep.
func record(tenant string) token.Record {
	created := time.Now().UTC().Truncate(time.Microsecond)
	lease := created.Add(30 * time.Second)
	return token.Record{
		Tenant:         tenant,
		ID:             token.NewID(),
		Operation:      "ledger.credit",
		Subject:        "user-42",
		State:          token.Consumed,
		Generation:     0,
		OperationID:    "op_x",
		CreatedAt:      created,
		ExpiresAt:      created.Add(time.Hour),
		RetainUntil:    created.Add(24 * time.Hour),
		LeaseExpiresAt: &lease,
	}
}

// withOutcome returns r with what a spend replays and no read shows.
func withOutcome(r token.Record, body []byte) token.Record {
	r.IntentID, r.PayloadDigest, r.ResultStatus, r.ResultBody = "intent-1", []byte{1, 2, 3}, 200, body
	return r
}

// fakeClock is the breaker's clock in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
