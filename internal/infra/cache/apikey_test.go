package cache

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// TestKeyNeverResolvedFromRedis: an authentic, live-looking resolution in
// Redis (written by an earlier version of tokend before the key was revoked,
// then brought back by a failover or an old snapshot) never resolves the
// key: what the loader, Postgres, says is what GetOrLoadKey returns, every
// time.
func TestKeyNeverResolvedFromRedis(t *testing.T) {
	ctx := context.Background()
	c, mr, _ := openMini(t, Config{})
	hash := []byte("key hash")
	live, _ := json.Marshal(apikey.Key{Tenant: "acme", ID: "key_1", Role: apikey.Operator, CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
	key := c.apiKeyKey(hash)
	mr.Set(key, c.seal(key, 0, live))

	loads := 0
	revoked := func(context.Context) (apikey.Key, error) { loads++; return apikey.Key{}, apikey.ErrUnauthorized }
	for range 3 {
		if got, err := c.GetOrLoadKey(ctx, hash, revoked); !errors.Is(err, apikey.ErrUnauthorized) {
			t.Fatalf("GetOrLoadKey of a revoked key = %+v, %v, want the loader's error", got, err)
		}
	}
	if loads != 3 {
		t.Errorf("loads = %d, want 3", loads)
	}

	// Nor is a resolution written: there is nothing for a lost write to
	// bring back.
	mr.Del(key)
	want := apikey.Key{Tenant: "acme", ID: "key_2", Role: apikey.Client}
	if got, err := c.GetOrLoadKey(ctx, hash, func(context.Context) (apikey.Key, error) { return want, nil }); err != nil || got != want {
		t.Fatalf("GetOrLoadKey = %+v, %v", got, err)
	}
	if mr.Exists(key) {
		t.Errorf("a resolution was written to Redis")
	}
}
