package cache

import (
	"context"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

// BenchmarkGetHit is a token lookup served by the real Redis.
func BenchmarkGetHit(b *testing.B) {
	ctx := context.Background()
	c, _ := openReal(b, Config{})
	rec := record("acme")
	c.fillToken(ctx, "acme", rec.ID, rec)
	load := func(context.Context) (token.Record, error) {
		b.Fatal("loaded on a hit")
		return token.Record{}, nil
	}
	for b.Loop() {
		if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetHitParallel is BenchmarkGetHit from GOMAXPROCS goroutines at
// once, each on a token of its own.
func BenchmarkGetHitParallel(b *testing.B) {
	ctx := context.Background()
	c, _ := openReal(b, Config{})
	b.RunParallel(func(pb *testing.PB) {
		rec := record("acme")
		c.fillToken(ctx, "acme", rec.ID, rec)
		load := func(context.Context) (token.Record, error) { return rec, nil }
		for pb.Next() {
			if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGetHitLocal is BenchmarkGetHit for a token in a terminal state,
// which after the first lookup is served in process without asking Redis.
func BenchmarkGetHitLocal(b *testing.B) {
	ctx := context.Background()
	c, _ := openReal(b, Config{})
	rec := terminalNow("acme")
	if _, err := c.GetOrLoad(ctx, "acme", rec.ID, func(context.Context) (token.Record, error) { return rec, nil }); err != nil {
		b.Fatal(err)
	}
	load := func(context.Context) (token.Record, error) {
		b.Fatal("loaded on a hit")
		return token.Record{}, nil
	}
	for b.Loop() {
		if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetHitLocalParallel is BenchmarkGetHitLocal from GOMAXPROCS
// goroutines at once, each on a token of its own.
func BenchmarkGetHitLocalParallel(b *testing.B) {
	ctx := context.Background()
	c, _ := openReal(b, Config{})
	b.RunParallel(func(pb *testing.PB) {
		rec := terminalNow("acme")
		load := func(context.Context) (token.Record, error) { return rec, nil }
		for pb.Next() {
			if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// terminalNow returns a consumed token of tenant retained for a day from
// now by the process clock, so that the in-process layer keeps it.
func terminalNow(tenant string) token.Record {
	rec := record(tenant)
	rec.State, rec.RetainUntil = token.Consumed, time.Now().Add(24*time.Hour)
	return rec
}

// BenchmarkLoadWithoutCache is the same lookup with the cache off and a
// loader that touches no database: the floor any real loader is above.
func BenchmarkLoadWithoutCache(b *testing.B) {
	ctx := context.Background()
	var c *Cache
	rec := record("acme")
	load := func(context.Context) (token.Record, error) { return rec, nil }
	for b.Loop() {
		if _, err := c.GetOrLoad(ctx, "acme", rec.ID, load); err != nil {
			b.Fatal(err)
		}
	}
}
