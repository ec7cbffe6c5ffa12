package cache

import (
	"context"
	"encoding/hex"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// keyRevoked is the version of an API key tombstone.
const keyRevoked = 1

// GetOrLoadKey returns what load, typically apikey.Resolve, resolves the
// API key whose SHA-256 is keyHash to. Redis holds no resolution: that a
// key is live is a fact that changes (a revocation), and a Redis that lost
// the revocation's tombstone (a failover, a restart from an old snapshot)
// would make a revoked key work again. So a resolution is never read from
// Redis, whatever an entry there says; the in-process cache in front of
// this (httpapi.Config.KeyCacheTTL) spares Postgres the repeats.
func (c *Cache) GetOrLoadKey(ctx context.Context, keyHash []byte, load func(context.Context) (apikey.Key, error)) (apikey.Key, error) {
	return load(ctx)
}

// InvalidateKey writes a tombstone over the cached resolution of the API
// key with hash keyHash. This version of tokend reads no resolution from
// Redis; the tombstone is for instances of earlier versions sharing the
// Redis during a rolling deploy, which do. Call it after the key's
// revocation committed.
func (c *Cache) InvalidateKey(ctx context.Context, keyHash []byte) {
	if c.off() || len(keyHash) == 0 {
		return
	}
	c.tombstone(ctx, kindAPIKey, c.apiKeyKey(keyHash), keyRevoked, c.cfg.KeyTTL)
}

func (c *Cache) apiKeyKey(keyHash []byte) string {
	return c.cfg.Prefix + layout + "key:" + hex.EncodeToString(keyHash)
}
