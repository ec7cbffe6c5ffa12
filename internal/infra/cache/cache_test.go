package cache

import (
	"context"
	"testing"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/token"
)

// TestOff: without Redis every call goes to its loader, and nothing fails.
func TestOff(t *testing.T) {
	off, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    *Cache
	}{
		{"no URL", off},
		{"nil", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := tt.c
			rec := record("acme")
			d := newDB(rec)
			for range 2 {
				if _, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID)); err != nil {
					t.Fatal(err)
				}
			}
			if n := d.loads.Load(); n != 2 {
				t.Errorf("loads = %d, want 2", n)
			}
			if _, ok := c.Get(ctx, "acme", rec.ID); ok {
				t.Error("Get hit")
			}
			c.Invalidate(ctx, "acme", rec.ID, token.Revoked, 0)

			hash := []byte("hash")
			c.RememberRejection(ctx, "acme", hash, "o", "s", token.ErrRevoked)
			if err := c.Rejected(ctx, "acme", hash, "o", "s"); err != nil {
				t.Errorf("Rejected = %v, want nil", err)
			}
			keyLoads := 0
			for range 2 {
				c.GetOrLoadKey(ctx, hash, func(context.Context) (apikey.Key, error) {
					keyLoads++
					return apikey.Key{Tenant: "acme", ID: "k", Role: apikey.Client}, nil
				})
			}
			if keyLoads != 2 {
				t.Errorf("key loads = %d, want 2", keyLoads)
			}
			c.InvalidateKey(ctx, hash)

			if c.Status() != StatusOff || !c.Healthy() {
				t.Errorf("Status = %s, Healthy = %v, want %s, true", c.Status(), c.Healthy(), StatusOff)
			}
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestStatusWithRedis(t *testing.T) {
	c, _, obs := openMini(t, Config{})
	if c.Status() != StatusOK || !c.Healthy() {
		t.Errorf("Status = %s, Healthy = %v, want %s, true", c.Status(), c.Healthy(), StatusOK)
	}
	if got := obs.breakerStates(); len(got) != 1 || got[0] != stateClosed {
		t.Errorf("observer told %v, want the initial state, closed", got)
	}
}
