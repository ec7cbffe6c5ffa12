package cache

import (
	"context"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

// TestTTL checks that every kind of entry goes away by itself, after the
// TTL its kind is given: the bound on staleness when an invalidation is
// lost.
func TestTTL(t *testing.T) {
	hash := []byte("0123456789abcdef0123456789abcdef")
	tests := []struct {
		name  string
		cfg   Config
		ttl   time.Duration
		write func(ctx context.Context, c *Cache, r token.Record) (redisKey string)
	}{
		{"token", Config{}, DefaultTokenTTL, func(ctx context.Context, c *Cache, r token.Record) string {
			c.fillToken(ctx, r.Tenant, r.ID, r)
			return c.tokenKey(r.Tenant, r.ID)
		}},
		{"token tombstone", Config{}, DefaultTokenTTL, func(ctx context.Context, c *Cache, r token.Record) string {
			c.Invalidate(ctx, r.Tenant, r.ID, token.Revoked, r.Generation)
			return c.tokenKey(r.Tenant, r.ID)
		}},
		{"token, configured", Config{TokenTTL: 3 * time.Second}, 3 * time.Second, func(ctx context.Context, c *Cache, r token.Record) string {
			c.fillToken(ctx, r.Tenant, r.ID, r)
			return c.tokenKey(r.Tenant, r.ID)
		}},
		{"rejection", Config{}, DefaultTokenTTL, func(ctx context.Context, c *Cache, r token.Record) string {
			c.RememberRejection(ctx, r.Tenant, hash, r.Operation, r.Subject, token.ErrRevoked)
			return c.secretKey(r.Tenant, hash)
		}},
		{"api key tombstone", Config{}, DefaultKeyTTL, func(ctx context.Context, c *Cache, r token.Record) string {
			c.InvalidateKey(ctx, hash)
			return c.apiKeyKey(hash)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, mr, _ := openMini(t, tt.cfg)
			k := tt.write(context.Background(), c, record("acme"))

			mr.FastForward(tt.ttl - time.Millisecond)
			if !mr.Exists(k) {
				t.Fatalf("%s gone before %v", k, tt.ttl)
			}
			mr.FastForward(time.Millisecond)
			if mr.Exists(k) {
				t.Fatalf("%s outlived %v", k, tt.ttl)
			}
		})
	}
}
