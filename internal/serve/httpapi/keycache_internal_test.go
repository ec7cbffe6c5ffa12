package httpapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// TestKeyCacheReleasesExpiredEntries: resolutions past their TTL are let go
// by the next write, not kept until a read of the same key comes, and the
// byte estimate follows what is held.
func TestKeyCacheReleasesExpiredEntries(t *testing.T) {
	resolve := func(_ context.Context, presented string) (apikey.Key, error) {
		return apikey.Key{ID: "key_" + presented, Tenant: "acme", Role: apikey.Client}, nil
	}
	c := newKeyCache(20*time.Millisecond, resolve)
	for i := range 100 {
		if _, err := c.authenticate(t.Context(), fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := c.authenticate(t.Context(), "fresh"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.entries); n != 1 {
		t.Errorf("%d entries held after the TTL passed and one write, want 1", n)
	}
	if want := keySize(apikey.Key{ID: "key_fresh", Tenant: "acme", Role: apikey.Client}); c.bytes != want {
		t.Errorf("bytes = %d, want %d", c.bytes, want)
	}
}
