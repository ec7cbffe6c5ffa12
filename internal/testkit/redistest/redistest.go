// Package redistest hands tests a Redis, one way for every package: the real
// server scripts/test provides (URL, Forget), or an in-process miniredis
// (Mini) where a test needs to move Redis's clock or break it at will.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// DefaultURL is the Redis scripts/test provides when TOKEND_TEST_REDIS_URL
// is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL is the real Redis tests use: TOKEND_TEST_REDIS_URL, else DefaultURL.
func URL() string {
	if u := os.Getenv("TOKEND_TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Prefix returns a key prefix of t's own, name in it for whoever reads the
// keys, and Forgets it.
func Prefix(t testing.TB, name string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "tokend-test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	Forget(t, p)
	return p
}

// Forget deletes, when t and everything it started are done, what t left in
// the real Redis under prefix: the cache's entries, and the rate limiter's
// buckets, which live under "rate:"+prefix. Registered first, it runs last.
// An unreachable Redis fails t: scripts/test guarantees one.
func Forget(t testing.TB, prefix string) {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("TOKEND_TEST_REDIS_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	probe := redis.NewClient(opt)
	err = probe.Ping(ctx).Err()
	probe.Close()
	if err != nil {
		t.Fatalf("Redis at TOKEND_TEST_REDIS_URL (default %s) is unreachable; run scripts/test: %v", DefaultURL, err)
	}
	t.Cleanup(func() {
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		ctx := context.Background()
		for _, pattern := range []string{prefix + "*", "rate:" + prefix + "*"} {
			iter := rdb.Scan(ctx, 0, pattern, 100).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Logf("clean up %s: %v", pattern, err)
			}
		}
	})
}

// Mini starts a miniredis for t, stopped when t ends.
func Mini(t testing.TB) *miniredis.Miniredis {
	t.Helper()
	return miniredis.RunT(t)
}
