package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/tokend/tokend/token"
)

// openLocal returns a Cache on a fresh miniredis whose in-process layer
// runs on the returned clock.
func openLocal(t *testing.T, cfg Config) (*Cache, *miniredis.Miniredis, *recorder, *fakeClock) {
	t.Helper()
	c, mr, obs := openMini(t, cfg)
	clk := &fakeClock{now: time.Now().UTC().Truncate(time.Second)}
	c.now = clk.Now
	if c.local != nil {
		c.local.now = clk.Now
	}
	return c, mr, obs, clk
}

// terminal returns a token of tenant in state s, retained for a day after
// clk's now.
func terminal(tenant string, s token.State, clk *fakeClock) token.Record {
	r := record(tenant)
	r.State, r.Generation = s, 1
	r.RetainUntil = clk.Now().Add(24 * time.Hour)
	return r
}

// noLoad is a loader for lookups that must not reach it.
func noLoad(t *testing.T) func(context.Context) (token.Record, error) {
	return func(context.Context) (token.Record, error) {
		t.Error("loaded")
		return token.Record{}, token.ErrNotFound
	}
}

// localLen returns how many entries c holds in process, live or expired.
func localLen(c *Cache) int {
	c.local.mu.RLock()
	defer c.local.mu.RUnlock()
	return len(c.local.entries)
}

// A terminal token, once read from Postgres or from Redis, is served from
// the process without a call to Redis: Redis is stopped, and Get and
// GetOrLoad still answer, count hits, and see no error.
func TestLocalServesTerminal(t *testing.T) {
	terminals := []token.State{token.Consumed, token.Failed, token.Revoked, token.Expired}
	sources := []struct {
		name string
		read func(ctx context.Context, t *testing.T, c *Cache, d *db, rec token.Record)
	}{
		{"loaded", func(ctx context.Context, t *testing.T, c *Cache, d *db, rec token.Record) {
			if got, err := c.GetOrLoad(ctx, rec.Tenant, rec.ID, d.loader(rec.Tenant, rec.ID)); err != nil || !reflect.DeepEqual(got, rec) {
				t.Fatalf("GetOrLoad = %+v, %v", got, err)
			}
		}},
		{"read from Redis", func(ctx context.Context, t *testing.T, c *Cache, d *db, rec token.Record) {
			c.fillToken(ctx, rec.Tenant, rec.ID, rec)
			if got, ok := c.Get(ctx, rec.Tenant, rec.ID); !ok || !reflect.DeepEqual(got, rec) {
				t.Fatalf("Get = %+v, %v", got, ok)
			}
		}},
	}
	for _, src := range sources {
		for _, s := range terminals {
			t.Run(src.name+"/"+string(s), func(t *testing.T) {
				ctx := context.Background()
				c, mr, obs, clk := openLocal(t, Config{})
				rec := terminal("acme", s, clk)
				d := newDB(rec)
				src.read(ctx, t, c, d, rec)
				if _, ok := c.Get(ctx, "evil", rec.ID); ok {
					t.Fatal("another tenant was served the record")
				}
				loads, hits := d.loads.Load(), obs.count(kindToken, resultHit)

				mr.Close()
				if got, ok := c.Get(ctx, "acme", rec.ID); !ok || !reflect.DeepEqual(got, rec) {
					t.Errorf("Get with Redis gone = %+v, %v, want the record", got, ok)
				}
				if got, err := c.GetOrLoad(ctx, "acme", rec.ID, noLoad(t)); err != nil || !reflect.DeepEqual(got, rec) {
					t.Errorf("GetOrLoad with Redis gone = %+v, %v, want the record", got, err)
				}
				if n := d.loads.Load(); n != loads {
					t.Errorf("loads = %d, want %d", n, loads)
				}
				if n := obs.count(kindToken, resultHit); n != hits+2 {
					t.Errorf("hits = %d, want %d", n, hits+2)
				}
				for _, r := range []string{resultError, resultSkipped} {
					if n := obs.count(kindToken, r); n != 0 {
						t.Errorf("%s = %d, want 0: Redis was called", r, n)
					}
				}
			})
		}
	}
}

// A token that may still change is never kept in process: a change in
// Redis or in Postgres shows at the next read.
func TestLocalNeverHoldsNonTerminal(t *testing.T) {
	for _, s := range []token.State{token.Issued, token.Pending, token.Unknown} {
		t.Run(string(s), func(t *testing.T) {
			ctx := context.Background()
			c, mr, _, clk := openLocal(t, Config{})
			rec := terminal("acme", s, clk) // but for its state
			d := newDB(rec)
			if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
				t.Fatal(err)
			}
			if n := localLen(c); n != 0 {
				t.Fatalf("%d entries in process, want 0", n)
			}

			// Nor in Redis: even an authentic entry of such a token, as
			// an earlier version wrote, is a miss.
			changed := rec
			changed.Generation++
			key := c.tokenKey("acme", rec.ID)
			v, _ := version(changed.State, changed.Generation)
			body, _ := json.Marshal(changed)
			mr.Set(key, c.seal(key, v, body))
			if got, ok := c.Get(ctx, "acme", rec.ID); ok {
				t.Errorf("Get of a %s token's entry in Redis = gen %d, want a miss", s, got.Generation)
			}

			// Changed in Postgres, the Redis entry gone.
			changed.Generation++
			d.commit(changed)
			mr.Del(c.tokenKey("acme", rec.ID))
			got, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID))
			if err != nil || got.Generation != changed.Generation {
				t.Errorf("GetOrLoad after a change in Postgres = gen %d, %v, want gen %d", got.Generation, err, changed.Generation)
			}
			if n := d.loads.Load(); n != 2 {
				t.Errorf("loads = %d, want 2", n)
			}
			if n := localLen(c); n != 0 {
				t.Errorf("%d entries in process, want 0", n)
			}
		})
	}
}

// A copy lives until LocalTTL has passed or purgeMargin before the token's
// RetainUntil, whichever comes first, and is not kept at all when that is
// already past.
func TestLocalLifetime(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		retain time.Duration // RetainUntil, from now
		held   time.Duration // 0: not kept
	}{
		{"LocalTTL first", Config{}, 24 * time.Hour, DefaultLocalTTL},
		{"configured LocalTTL", Config{LocalTTL: 5 * time.Second}, 24 * time.Hour, 5 * time.Second},
		{"retention first", Config{}, purgeMargin + 10*time.Second, 10 * time.Second},
		{"retention ends within the margin", Config{}, purgeMargin - time.Second, 0},
		{"retention ends at the margin", Config{}, purgeMargin, 0},
		{"retention passed", Config{}, -time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c, mr, _, clk := openLocal(t, tt.cfg)
			rec := terminal("acme", token.Consumed, clk)
			rec.RetainUntil = clk.Now().Add(tt.retain)
			d := newDB(rec)
			if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
				t.Fatal(err)
			}
			mr.Del(c.tokenKey("acme", rec.ID)) // what Get finds now, it finds in process

			if tt.held == 0 {
				if _, ok := c.Get(ctx, "acme", rec.ID); ok {
					t.Fatal("kept in process")
				}
				if n := localLen(c); n != 0 {
					t.Fatalf("%d entries in process, want 0", n)
				}
				return
			}
			clk.Advance(tt.held - time.Nanosecond)
			if _, ok := c.Get(ctx, "acme", rec.ID); !ok {
				t.Fatalf("gone before %v", tt.held)
			}
			clk.Advance(time.Nanosecond)
			if _, ok := c.Get(ctx, "acme", rec.ID); ok {
				t.Fatalf("served after %v", tt.held)
			}
			if n := localLen(c); n != 0 {
				t.Errorf("%d entries in process after expiry, want 0", n)
			}
		})
	}
}

// LocalMax bounds the entries; the newest one is always among them.
func TestLocalMax(t *testing.T) {
	const limit, tokens = 3, 10
	ctx := context.Background()
	c, _, _, clk := openLocal(t, Config{LocalMax: limit})
	recs := make([]token.Record, tokens)
	for i := range recs {
		recs[i] = terminal("acme", token.Revoked, clk)
		d := newDB(recs[i])
		if _, err := c.GetOrLoad(ctx, "acme", recs[i].ID, d.loader("acme", recs[i].ID)); err != nil {
			t.Fatal(err)
		}
		if n := localLen(c); n > limit {
			t.Fatalf("%d entries in process, LocalMax is %d", n, limit)
		}
		if _, ok := c.local.get("acme", recs[i].ID); !ok {
			t.Fatalf("token %d was not kept", i)
		}
	}
	held := 0
	for _, r := range recs {
		if _, ok := c.local.get("acme", r.ID); ok {
			held++
		}
	}
	if held != limit {
		t.Errorf("%d tokens held, want %d", held, limit)
	}
}

// Invalidate drops the copy as well as the Redis entry.
func TestLocalInvalidate(t *testing.T) {
	ctx := context.Background()
	c, _, _, clk := openLocal(t, Config{})
	rec := terminal("acme", token.Consumed, clk)
	d := newDB(rec)
	load := d.loader("acme", rec.ID)
	if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
		t.Fatal(err)
	}
	c.Invalidate(ctx, "acme", rec.ID, rec.State, rec.Generation)
	if _, ok := c.local.get("acme", rec.ID); ok {
		t.Fatal("the copy outlived Invalidate")
	}
	if _, ok := c.Get(ctx, "acme", rec.ID); ok {
		t.Fatal("Get hit after Invalidate")
	}
	if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
		t.Fatal(err)
	}
	if n := d.loads.Load(); n != 2 {
		t.Errorf("loads = %d, want 2", n)
	}
	if _, ok := c.local.get("acme", rec.ID); !ok {
		t.Error("the reloaded record was not kept")
	}
}

// A negative LocalTTL keeps nothing in process, and neither does a Cache
// without Redis.
func TestLocalOff(t *testing.T) {
	ctx := context.Background()
	t.Run("LocalTTL < 0", func(t *testing.T) {
		c, mr, _, clk := openLocal(t, Config{LocalTTL: -1})
		if c.local != nil {
			t.Fatal("in-process layer made")
		}
		rec := terminal("acme", token.Expired, clk)
		d := newDB(rec)
		if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
			t.Fatal(err)
		}
		mr.Del(c.tokenKey("acme", rec.ID))
		if _, ok := c.Get(ctx, "acme", rec.ID); ok {
			t.Error("Get hit with the Redis entry gone")
		}
	})
	t.Run("no Redis", func(t *testing.T) {
		c, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		if c.local != nil {
			t.Fatal("in-process layer made")
		}
		rec := record("acme")
		rec.State, rec.RetainUntil = token.Consumed, time.Now().Add(24*time.Hour)
		d := newDB(rec)
		for range 2 {
			if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
				t.Fatal(err)
			}
		}
		if n := d.loads.Load(); n != 2 {
			t.Errorf("loads = %d, want 2", n)
		}
	})
}

// While the breaker is open nothing new is kept in process, and what was
// kept before is still served.
func TestLocalNotFilledWhileDegraded(t *testing.T) {
	ctx := context.Background()
	c, mr, _, clk := openLocal(t, Config{BreakerThreshold: 1, BreakerCooldown: time.Hour})
	before := terminal("acme", token.Consumed, clk)
	if _, err := c.GetOrLoad(ctx, "acme", before.ID, newDB(before).loader("acme", before.ID)); err != nil {
		t.Fatal(err)
	}
	mr.Close()
	rec := terminal("acme", token.Consumed, clk)
	d := newDB(rec)
	for range 2 {
		if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if c.Status() != StatusDegraded {
		t.Fatalf("Status = %s, want %s", c.Status(), StatusDegraded)
	}
	if n := d.loads.Load(); n != 2 {
		t.Errorf("loads = %d, want 2: nothing is kept while degraded", n)
	}
	if _, err := c.GetOrLoad(ctx, "acme", before.ID, noLoad(t)); err != nil {
		t.Errorf("the copy kept before the outage: %v", err)
	}
}

// Readers, invalidations, evictions and expiry at once: every reader gets
// its token's record. Run it with -race.
func TestLocalParallel(t *testing.T) {
	const tokens, readers, reads = 16, 8, 400
	ctx := context.Background()
	c, _, _, clk := openLocal(t, Config{LocalMax: tokens / 4, LocalTTL: time.Second})
	recs := make([]token.Record, tokens)
	for i := range recs {
		recs[i] = terminal(fmt.Sprintf("t%d", i%3), token.Consumed, clk)
	}
	d := newDB(recs...)

	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for range reads {
				r := recs[rand.IntN(tokens)]
				var got token.Record
				var err error
				switch n := rand.IntN(10); {
				case n == 0:
					c.Invalidate(ctx, r.Tenant, r.ID, r.State, r.Generation)
					continue
				case n == 1:
					clk.Advance(100 * time.Millisecond)
					continue
				case n < 5:
					var ok bool
					if got, ok = c.Get(ctx, r.Tenant, r.ID); !ok {
						continue
					}
				default:
					got, err = c.GetOrLoad(ctx, r.Tenant, r.ID, d.loader(r.Tenant, r.ID))
				}
				if err != nil || !reflect.DeepEqual(got, r) {
					t.Errorf("read of %s = %+v, %v, want %+v", r.ID, got, err, r)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := localLen(c); n > tokens/4 {
		t.Errorf("%d entries in process, LocalMax is %d", n, tokens/4)
	}
}

// TestLocalBoundedInBytes: copies are evicted to stay within LocalMaxBytes
// however many fit under LocalMax, and the estimate follows what is held.
func TestLocalBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	const maxBytes = 64 << 10
	c, _, _, clk := openLocal(t, Config{LocalMax: 1_000_000, LocalMaxBytes: maxBytes})
	long := string(make([]byte, 2000)) // a long subject, say
	for range 500 {
		r := terminal("acme", token.Consumed, clk)
		r.Subject = long
		if _, err := c.GetOrLoad(ctx, "acme", r.ID, newDB(r).loader("acme", r.ID)); err != nil {
			t.Fatal(err)
		}
	}
	c.local.mu.RLock()
	defer c.local.mu.RUnlock()
	var sum int64
	for _, e := range c.local.entries {
		sum += e.size
	}
	if sum != c.local.bytes || c.local.bytes > maxBytes || len(c.local.entries) == 0 {
		t.Errorf("held %d entries of %d bytes (counted %d), want some, within %d", len(c.local.entries), sum, c.local.bytes, maxBytes)
	}
}

// TestLocalJanitorReleasesExpired: an idle process lets go of copies past
// their TTL without a read of them.
func TestLocalJanitorReleasesExpired(t *testing.T) {
	ctx := context.Background()
	c, _, _, clk := openLocal(t, Config{LocalTTL: 30 * time.Millisecond})
	for range 50 {
		r := terminal("acme", token.Failed, clk)
		if _, err := c.GetOrLoad(ctx, "acme", r.ID, newDB(r).loader("acme", r.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if n := localLen(c); n != 50 {
		t.Fatalf("%d copies held, want 50", n)
	}
	clk.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for localLen(c) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d expired copies still held 5s after their TTL, without reads", localLen(c))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
