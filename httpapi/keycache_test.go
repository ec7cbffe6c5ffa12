package httpapi_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/httpapi"
	"github.com/tokend/tokend/internal/apikey"
)

func TestKeyCacheRemembersOnlySuccesses(t *testing.T) {
	t.Parallel()
	var lookups atomic.Int64
	var a *api
	a = newAPI(t, func(c *httpapi.Config) {
		c.KeyCacheTTL = time.Hour
		c.Authenticate = func(ctx context.Context, presented string) (apikey.Key, error) {
			lookups.Add(1)
			return apikey.Resolve(ctx, c.Pool, presented)
		}
	})
	key := a.client()
	for range 5 {
		if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d lookups for 5 requests with one key, want 1", n)
	}
	// A refused key is asked about every time: nothing negative is cached.
	for range 3 {
		wantProblem(t, a.get("tkd_"+"unknown", "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
	}
	if n := lookups.Load(); n != 4 {
		t.Fatalf("%d lookups after 3 refused requests, want 4", n)
	}
}

// A key revoked elsewhere stops working once the short TTL has passed.
func TestKeyCacheForgetsRevokedKeysAfterTTL(t *testing.T) {
	t.Parallel()
	a := newAPI(t, func(c *httpapi.Config) { c.KeyCacheTTL = 50 * time.Millisecond })
	key := a.client()
	if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
		t.Fatalf("%d %s", res.status, res.body)
	}
	if _, err := apikey.Revoke(context.Background(), a.pool, "acme", a.keyIDs["acme/client"]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.get(key, "/v1/ledger/accounts/x").status != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("a revoked key is still accepted 10s later")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
