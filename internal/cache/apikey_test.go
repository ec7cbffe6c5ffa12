package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/apikey"
)

func TestGetOrLoadKey(t *testing.T) {
	ctx := context.Background()
	c, _, obs := openMini(t, Config{})
	hash := []byte("key hash")
	want := apikey.Key{Tenant: "acme", ID: "key_1", Role: apikey.Client, CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	var loads atomic.Int64
	live := func(context.Context) (apikey.Key, error) {
		loads.Add(1)
		return want, nil
	}

	for range 3 {
		if got, err := c.GetOrLoadKey(ctx, hash, live); err != nil || got != want {
			t.Fatalf("GetOrLoadKey = %+v, %v, want %+v", got, err, want)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Errorf("loads = %d, want 1", n)
	}

	// Revocation commits; a resolution that read the key before writes late.
	c.InvalidateKey(ctx, hash)
	if _, err := c.GetOrLoadKey(ctx, hash, live); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.readKey(ctx, c.apiKeyKey(hash)); ok {
		t.Fatal("a late write of a revoked key's resolution was cached over its tombstone")
	}
	revoked := func(context.Context) (apikey.Key, error) { loads.Add(1); return apikey.Key{}, apikey.ErrUnauthorized }
	before := loads.Load()
	for range 2 {
		if _, err := c.GetOrLoadKey(ctx, hash, revoked); !errors.Is(err, apikey.ErrUnauthorized) {
			t.Fatalf("GetOrLoadKey of a revoked key = %v, want the loader's error", err)
		}
	}
	if n := loads.Load() - before; n != 2 {
		t.Errorf("loads of a revoked key = %d, want 2: errors are not cached", n)
	}

	if n := obs.count(kindAPIKey, resultGarbage) + obs.count(kindAPIKey, resultError); n != 0 {
		t.Errorf("garbage and errors = %d, want 0", n)
	}
}

// TestKeyGarbage: an authentic entry that is unusable is garbage, a value
// without a valid MAC is forged; neither resolves a key, both are counted
// and replaced by the loaded key.
func TestKeyGarbage(t *testing.T) {
	tests := []string{"junk", "0:{}", `0:{"Tenant":"acme","ID":"k"}`, `0:{"Tenant":"acme","ID":"k","Role":"root"}`, `0:{"Tenant":"","ID":"k","Role":"client"}`, `1:{"Tenant":"acme","ID":"k","Role":"client"}`, "7:", `0:{"Tenant":"acme","ID":"k","Role":"operator"}`}
	for _, raw := range tests {
		for _, seal := range []bool{false, true} {
			vs, body, found := strings.Cut(raw, ":")
			if seal && !found {
				continue
			}
			result := resultForged
			if seal {
				result = resultGarbage
				if raw == tests[len(tests)-1] {
					continue // authentic and usable: not garbage
				}
			}
			t.Run(fmt.Sprintf("%s/sealed=%v", raw, seal), func(t *testing.T) {
				ctx := context.Background()
				c, mr, obs := openMini(t, Config{})
				hash := []byte("key hash")
				key := c.apiKeyKey(hash)
				if seal {
					v, _ := strconv.ParseInt(vs, 10, 64)
					mr.Set(key, c.seal(key, v, []byte(body)))
				} else {
					mr.Set(key, raw)
				}
				want := apikey.Key{Tenant: "acme", ID: "k", Role: apikey.Client}
				got, err := c.GetOrLoadKey(ctx, hash, func(context.Context) (apikey.Key, error) { return want, nil })
				if err != nil || got != want {
					t.Fatalf("GetOrLoadKey = %+v, %v", got, err)
				}
				if n := obs.count(kindAPIKey, result); n != 1 {
					t.Errorf("%s counted %d times, want 1", result, n)
				}
				if k, ok := c.readKey(ctx, key); !ok || k != want {
					t.Errorf("after the load the entry is %+v, %v, want the loaded key", k, ok)
				}
			})
		}
	}
}
