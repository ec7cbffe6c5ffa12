package cache

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

func TestGetOrLoadMissThenHit(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			c, obs := b.open(t, Config{})
			want := record("acme")
			d := newDB(want)

			for range 3 {
				got, err := c.GetOrLoad(ctx, "acme", want.ID, d.loader("acme", want.ID))
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("GetOrLoad = %+v, want %+v", got, want)
				}
			}
			if n := d.loads.Load(); n != 1 {
				t.Errorf("loads = %d, want 1", n)
			}
			if m, h := obs.count(kindToken, resultMiss), obs.count(kindToken, resultHit); m != 1 || h != 2 {
				t.Errorf("misses, hits = %d, %d, want 1, 2", m, h)
			}
			if got, ok := c.Get(ctx, "acme", want.ID); !ok || !reflect.DeepEqual(got, want) {
				t.Errorf("Get = %+v, %v, want the record", got, ok)
			}
		})
	}
}

// TestInvalidateAfterEachTransition walks tokens through the state machine
// the way httpapi will: a reader caches the token, a change commits, the
// cache is invalidated, and a reader that read the row before the commit
// writes it late. The late write must not be served; the committed row must.
func TestInvalidateAfterEachTransition(t *testing.T) {
	tests := []struct {
		name  string
		from  token.State
		gen   int64
		steps []token.Action
	}{
		{"issued to pending to consumed", token.Issued, 0, []token.Action{token.Lease, token.Complete}},
		{"issued to revoked", token.Issued, 0, []token.Action{token.Revoke}},
		{"pending to unknown to issued, generation bumped", token.Pending, 1, []token.Action{token.ReportUnknown, token.ReconcileNotExecuted}},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				c, _ := b.open(t, Config{})
				row := record("acme")
				row.State, row.Generation = tt.from, tt.gen
				d := newDB(row)
				load := d.loader("acme", row.ID)

				for _, a := range tt.steps {
					before := row
					if _, err := c.GetOrLoad(ctx, "acme", row.ID, load); err != nil {
						t.Fatal(err)
					}

					to, err := token.Next(row.State, a)
					if err != nil {
						t.Fatal(err)
					}
					row.State = to
					if a.BumpsGeneration() {
						row.Generation++
					}
					d.commit(row)
					c.Invalidate(ctx, "acme", row.ID, row.State, row.Generation)

					// The late reader: it read before the commit, and writes now.
					late, err := c.GetOrLoad(ctx, "acme", row.ID, func(context.Context) (token.Record, error) { return before, nil })
					if err != nil || late.State != before.State {
						t.Fatalf("%s: late reader got %s, %v", a, late.State, err)
					}
					if got, ok := c.Get(ctx, "acme", row.ID); ok {
						t.Fatalf("%s: after the late write Get = %s gen %d, want a miss", a, got.State, got.Generation)
					}

					got, err := c.GetOrLoad(ctx, "acme", row.ID, load)
					if err != nil {
						t.Fatal(err)
					}
					if got.State != row.State || got.Generation != row.Generation {
						t.Fatalf("%s: GetOrLoad = %s gen %d, want %s gen %d", a, got.State, got.Generation, row.State, row.Generation)
					}
					// Only a terminal row is cached at all (settled).
					if got, ok := c.Get(ctx, "acme", row.ID); ok != row.State.Terminal() || ok && got.State != row.State {
						t.Fatalf("%s: Get = %s, %v, want the committed %s row cached only if terminal", a, got.State, ok, row.State)
					}
				}
			})
		}
	}
}

// TestWriteOrder checks the version rule on every pair of writes that can
// race: whatever the order they land in, the newer one stands.
func TestWriteOrder(t *testing.T) {
	const (
		entry = "entry"
		tomb  = "tombstone"
	)
	type write struct {
		kind  string
		state token.State
		gen   int64
	}
	tests := []struct {
		name          string
		first, second write
		want          *write // what Get serves; nil for a miss
	}{
		{
			name:  "old entry written late loses to a newer entry",
			first: write{entry, token.Consumed, 1}, second: write{entry, token.Pending, 1},
			want: &write{entry, token.Consumed, 1},
		},
		{
			name:  "old entry written late loses to the tombstone of a newer row",
			first: write{tomb, token.Consumed, 1}, second: write{entry, token.Pending, 1},
		},
		{
			name:  "older generation loses to a newer one",
			first: write{entry, token.Consumed, 2}, second: write{entry, token.Failed, 1},
			want: &write{entry, token.Consumed, 2},
		},
		{
			name:  "committed row replaces its own tombstone",
			first: write{tomb, token.Consumed, 1}, second: write{entry, token.Consumed, 1},
			want: &write{entry, token.Consumed, 1},
		},
		{
			name:  "newer entry replaces an older one",
			first: write{entry, token.Pending, 1}, second: write{entry, token.Consumed, 1},
			want: &write{entry, token.Consumed, 1},
		},
		{
			name:  "late invalidation loses to a newer entry",
			first: write{entry, token.Consumed, 2}, second: write{tomb, token.Unknown, 1},
			want: &write{entry, token.Consumed, 2},
		},
		{
			name:  "a token that may still change is never cached",
			first: write{tomb, token.Issued, 0}, second: write{entry, token.Pending, 1},
		},
		{
			name:  "invalidation replaces the entry it invalidates",
			first: write{entry, token.Issued, 0}, second: write{tomb, token.Revoked, 0},
		},
		{
			name:  "tombstone of unknown generation refuses every entry",
			first: write{tomb, token.Consumed, -1}, second: write{entry, token.Consumed, 7},
		},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				c, _ := b.open(t, Config{})
				base := record("acme")
				for _, w := range []write{tt.first, tt.second} {
					if w.kind == tomb {
						c.Invalidate(ctx, "acme", base.ID, w.state, w.gen)
						continue
					}
					r := base
					r.State, r.Generation = w.state, w.gen
					c.fillToken(ctx, "acme", r.ID, r)
				}
				got, ok := c.Get(ctx, "acme", base.ID)
				switch {
				case tt.want == nil && ok:
					t.Errorf("Get = %s gen %d, want a miss", got.State, got.Generation)
				case tt.want != nil && !ok:
					t.Errorf("Get missed, want %s gen %d", tt.want.state, tt.want.gen)
				case tt.want != nil && (got.State != tt.want.state || got.Generation != tt.want.gen):
					t.Errorf("Get = %s gen %d, want %s gen %d", got.State, got.Generation, tt.want.state, tt.want.gen)
				}
			})
		}
	}
}

// TestGarbageIgnoredAndReplaced writes what no Cache writes where a token
// entry goes: values without a valid MAC (forged), and authentic entries
// of another tenant's or another token's record (garbage). Each must be
// counted, never served, and replaced by the loaded row.
func TestGarbageIgnoredAndReplaced(t *testing.T) {
	want := record("acme")
	sealed := func(r token.Record, v int64) func(c *Cache, key string) string {
		return func(c *Cache, key string) string {
			body, err := json.Marshal(shown(r))
			if err != nil {
				t.Fatal(err)
			}
			if v < 0 {
				v, _ = version(r.State, r.Generation)
			}
			return c.seal(key, v, body)
		}
	}
	plain := func(raw string) func(*Cache, string) string { return func(*Cache, string) string { return raw } }
	otherTenant, otherID, badVersion := want, want, want
	otherTenant.Tenant = "evil"
	otherID.ID = token.NewID()
	badVersion.Generation = 5

	tests := []struct {
		name   string
		raw    func(c *Cache, key string) string // nil: a key of another type
		result string
	}{
		{"not an entry", plain("hello"), resultForged},
		{"empty", plain(""), resultForged},
		{"bad json", plain(`3:{"Tenant":`), resultForged},
		{"json of another shape", plain(`0:[1,2,3]`), resultForged},
		{"high version, no record", plain("9000000000:x"), resultForged},
		{"an unsealed record", func(c *Cache, key string) string {
			body, _ := json.Marshal(want)
			return "0::" + string(body)
		}, resultForged},
		{"another tenant's record", sealed(otherTenant, -1), resultGarbage},
		{"another token's record", sealed(otherID, -1), resultGarbage},
		{"version disagrees with the record", sealed(badVersion, 0), resultGarbage},
		{"key of another type", nil, resultGarbage},
	}
	for _, b := range backends {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				ctx := context.Background()
				c, obs := b.open(t, Config{})
				key := c.tokenKey("acme", want.ID)
				var err error
				if tt.raw == nil {
					err = c.rdb.HSet(ctx, key, "f", "v").Err()
				} else {
					err = c.rdb.Set(ctx, key, tt.raw(c, key), 0).Err()
				}
				if err != nil {
					t.Fatal(err)
				}

				if got, ok := c.Get(ctx, "acme", want.ID); ok {
					t.Fatalf("Get served garbage: %+v", got)
				}
				d := newDB(want)
				got, err := c.GetOrLoad(ctx, "acme", want.ID, d.loader("acme", want.ID))
				if err != nil || !reflect.DeepEqual(got, shown(want)) {
					t.Fatalf("GetOrLoad = %+v, %v, want the loaded record", got, err)
				}
				if n := obs.count(kindToken, tt.result); n < 1 {
					t.Errorf("%s counted %d times, want at least 1", tt.result, n)
				}
				if n := obs.count(kindToken, resultError); n != 0 {
					t.Errorf("errors = %d, want 0: garbage is not a Redis failure", n)
				}
				if got, ok := c.Get(ctx, "acme", want.ID); !ok || !reflect.DeepEqual(got, shown(want)) {
					t.Errorf("after the load Get = %+v, %v, want the loaded record in place of the garbage", got, ok)
				}
			})
		}
	}
}

func TestOtherTenantNeverServed(t *testing.T) {
	ctx := context.Background()
	c, _, _ := openMini(t, Config{})
	rec := record("acme")
	d := newDB(rec)
	if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
		t.Fatal(err)
	}

	if got, ok := c.Get(ctx, "evil", rec.ID); ok {
		t.Errorf("Get for another tenant = %+v", got)
	}
	got, err := c.GetOrLoad(ctx, "evil", rec.ID, d.loader("evil", rec.ID))
	if !errors.Is(err, token.ErrNotFound) {
		t.Errorf("GetOrLoad for another tenant = %+v, %v, want token.ErrNotFound", got, err)
	}
	if _, ok := c.Get(ctx, "acme", rec.ID); !ok {
		t.Error("the owner's entry is gone")
	}
}

func TestGetOrLoadCachesNoError(t *testing.T) {
	ctx := context.Background()
	c, _, _ := openMini(t, Config{})
	d := newDB()
	id := token.NewID()
	for range 2 {
		if _, err := c.GetOrLoad(ctx, "acme", id, d.loader("acme", id)); !errors.Is(err, token.ErrNotFound) {
			t.Fatalf("err = %v, want token.ErrNotFound", err)
		}
	}
	if n := d.loads.Load(); n != 2 {
		t.Errorf("loads = %d, want 2: a missing token is not cached", n)
	}
}

func TestMalformedIDSkipsRedis(t *testing.T) {
	ctx := context.Background()
	c, _, obs := openMini(t, Config{})
	d := newDB()
	for _, id := range []string{"x:y", "", "tok_" + "*"} {
		if _, err := c.GetOrLoad(ctx, "acme", id, d.loader("acme", id)); !errors.Is(err, token.ErrNotFound) {
			t.Errorf("GetOrLoad(%q) err = %v, want the loader's", id, err)
		}
		c.Invalidate(ctx, "acme", id, token.Revoked, 0)
	}
	if len(obs.counts) != 0 {
		t.Errorf("Redis was used: %v", obs.counts)
	}
}

// TestStampedeLoadsOnce starts many lookups of one missing token and makes
// the load wait until every one of them has started: without the shared
// flight, each would find Redis empty and load on its own.
func TestStampedeLoadsOnce(t *testing.T) {
	const n = 32
	ctx := context.Background()
	c, _, _ := openMini(t, Config{})
	rec := record("acme")
	d := newDB(rec)

	var started sync.WaitGroup
	started.Add(n)
	load := func(ctx context.Context) (token.Record, error) {
		started.Wait()
		return d.loader("acme", rec.ID)(ctx)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			started.Done()
			got, err := c.GetOrLoad(ctx, "acme", rec.ID, load)
			if err == nil && got.ID != rec.ID {
				err = errors.New("got another record")
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := d.loads.Load(); got != 1 {
		t.Errorf("loads = %d, want 1", got)
	}
}

// TestLostInvalidationNotSeenHere: when the tombstone cannot be written,
// Redis would keep an entry from before the change; but a token that may
// still change is never cached, so there is none to see, on this process
// or another, and the read after the change shows it.
func TestLostInvalidationNotSeenHere(t *testing.T) {
	ctx := context.Background()
	c, mr, _ := openMini(t, Config{BreakerThreshold: 100, Timeout: 200 * time.Millisecond})
	rec := record("acme")
	rec.State = token.Issued
	d := newDB(rec)
	if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
		t.Fatal(err)
	}
	changed := rec
	changed.State, changed.Generation = token.Pending, 1
	d.commit(changed)
	mr.Close() // the invalidation is lost
	c.Invalidate(ctx, "acme", rec.ID, changed.State, changed.Generation)
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{URL: "redis://" + mr.Addr(), MACKey: c.macKey, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for name, p := range map[string]*Cache{"this process": c, "another process": other} {
		if got, ok := p.Get(ctx, "acme", rec.ID); ok {
			t.Fatalf("%s: Get after a lost invalidation = %s gen %d from Redis, want a miss", name, got.State, got.Generation)
		}
		got, err := p.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID))
		if err != nil || got.State != token.Pending {
			t.Fatalf("%s: GetOrLoad after a lost invalidation = %s, %v, want pending", name, got.State, err)
		}
	}
}

// TestChangingTokenSkipsRedis: a token that may still change is loaded on
// every read, and Redis, which cannot answer for it, is asked only on the
// first; once it settles, its read fills Redis and the next is a hit.
func TestChangingTokenSkipsRedis(t *testing.T) {
	ctx := context.Background()
	c, obs := openReal(t, Config{LocalTTL: -1})
	rec := record("acme")
	rec.State = token.Issued
	d := newDB(rec)
	for range 3 {
		if got, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil || got.State != token.Issued {
			t.Fatalf("GetOrLoad = %s, %v", got.State, err)
		}
	}
	if n, m, s := d.loads.Load(), obs.count(kindToken, resultMiss), obs.count(kindToken, resultSkipped); n != 3 || m != 1 || s != 2 {
		t.Errorf("loads, misses, skipped = %d, %d, %d, want 3, 1, 2", n, m, s)
	}
	settled := rec
	settled.State = token.Consumed
	d.commit(settled)
	for range 2 {
		if got, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil || got.State != token.Consumed {
			t.Fatalf("GetOrLoad after the spend = %s, %v", got.State, err)
		}
	}
	if n, h := d.loads.Load(), obs.count(kindToken, resultHit); n != 4 || h != 1 {
		t.Errorf("loads, hits = %d, %d, want 4, 1", n, h)
	}
}
