package httpapi_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
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

// A drop while a resolution is in flight (it read the key before the
// revocation) keeps that resolution from being remembered: the next request
// asks again and is refused.
func TestKeyCacheDropDuringResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		drop func(a *api, key string)
	}{
		{"ForgetKey", func(a *api, key string) {
			h := sha256.Sum256([]byte(key))
			a.srv.ForgetKey(context.Background(), h[:])
		}},
		{"ForgetAllKeys", func(a *api, _ string) { a.srv.ForgetAllKeys() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				lookups  atomic.Int64
				hold     atomic.Bool
				resolved = make(chan struct{})
				resume   = make(chan struct{})
			)
			a := newAPI(t, func(c *httpapi.Config) {
				c.KeyCacheTTL = time.Hour
				c.Authenticate = func(ctx context.Context, presented string) (apikey.Key, error) {
					lookups.Add(1)
					k, err := apikey.Resolve(ctx, c.Pool, presented)
					if hold.Load() {
						resolved <- struct{}{}
						<-resume
					}
					return k, err
				}
			})
			key := a.client()
			hold.Store(true)
			first := make(chan response, 1)
			go func() { first <- a.get(key, "/v1/ledger/accounts/x") }()
			<-resolved // the key was read, live
			hold.Store(false)
			if _, err := a.pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, a.keyIDs["acme/client"]); err != nil {
				t.Fatal(err)
			}
			tt.drop(a, key)
			close(resume)
			// The request in flight began before the revocation; it may pass.
			if res := <-first; res.status != http.StatusOK {
				t.Fatalf("request in flight: %d %s", res.status, res.body)
			}
			wantProblem(t, a.get(key, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
			if n := lookups.Load(); n != 2 {
				t.Errorf("%d lookups, want 2: the resolution in flight was remembered", n)
			}
		})
	}
}

// ForgetAllKeys (what a lost revocation listener calls) drops what is
// cached, so keys revoked meanwhile are refused.
func TestKeyCacheForgetAll(t *testing.T) {
	t.Parallel()
	a := newAPI(t, func(c *httpapi.Config) { c.KeyCacheTTL = time.Hour })
	key := a.client()
	if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
		t.Fatalf("%d %s", res.status, res.body)
	}
	if _, err := a.pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, a.keyIDs["acme/client"]); err != nil {
		t.Fatal(err)
	}
	if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
		t.Fatalf("cached: %d %s, want 200", res.status, res.body)
	}
	a.srv.ForgetAllKeys()
	wantProblem(t, a.get(key, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
}
