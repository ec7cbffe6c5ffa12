package cache

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/tokend/tokend/internal/apikey"
)

// Versions of an API key entry: a key is live until revoked, and never
// comes back.
const (
	keyLive    = 0
	keyRevoked = 1
)

// GetOrLoadKey returns the API key whose SHA-256 is keyHash (what
// api_keys.key_hash holds), from the cache or else from load, typically
// apikey.Resolve, whose result it caches. Concurrent calls for
// the same key share one lookup and at most one load, never one that had
// begun when they arrived (see flights).
//
// Errors from load (an unknown key, a revoked one, Postgres failing) are
// returned as they are and nothing is cached for them: a bad key costs a
// Postgres lookup every time, and a key created a moment ago works at once.
//
// The entry is found by the hash alone, since resolving the key is what
// tells the tenant; the hash is of a random key, so it is unique across
// tenants.
func (c *Cache) GetOrLoadKey(ctx context.Context, keyHash []byte, load func(context.Context) (apikey.Key, error)) (apikey.Key, error) {
	if c.off() || len(keyHash) == 0 {
		return load(ctx)
	}
	key := c.apiKeyKey(keyHash)
	return shared(ctx, &c.flights, key, func(ctx context.Context) (apikey.Key, error) {
		began := time.Now()
		if k, ok := c.readKey(ctx, key); ok {
			return k, nil
		}
		k, err := load(ctx)
		if err != nil {
			return k, err
		}
		if !fresh(began, c.cfg.KeyTTL) {
			return k, nil
		}
		if body, err := json.Marshal(k); err == nil {
			c.put(ctx, kindAPIKey, key, keyLive, body, c.cfg.KeyTTL)
		}
		return k, nil
	})
}

// InvalidateKey drops the cached resolution of the API key with hash
// keyHash. Call it after the key's revocation committed: it writes a
// tombstone that refuses the entry a concurrent GetOrLoadKey may still
// write from a read of before the revocation. When Redis fails, the entry
// may stay until its TTL (Config.KeyTTL) for other processes; this one
// skips Redis for the key meanwhile.
func (c *Cache) InvalidateKey(ctx context.Context, keyHash []byte) {
	if c.off() || len(keyHash) == 0 {
		return
	}
	c.tombstone(ctx, kindAPIKey, c.apiKeyKey(keyHash), keyRevoked, c.cfg.KeyTTL)
}

// readKey reads the API key entry at key. Only an authentic entry (see
// MACKey) is believed: whoever can write to Redis cannot make a key
// resolve, to any tenant or role.
func (c *Cache) readKey(ctx context.Context, key string) (apikey.Key, bool) {
	if c.unsure.has(key) {
		c.observe(kindAPIKey, resultSkipped)
		return apikey.Key{}, false
	}
	raw, ok := c.get(ctx, kindAPIKey, key)
	if !ok {
		return apikey.Key{}, false
	}
	v, body, ok := c.unseal(key, raw)
	if !ok {
		c.forged(ctx, kindAPIKey, key, raw)
		return apikey.Key{}, false
	}
	if v == keyRevoked && body == "" {
		c.observe(kindAPIKey, resultMiss) // a tombstone
		return apikey.Key{}, false
	}
	var k apikey.Key
	if v != keyLive || json.Unmarshal([]byte(body), &k) != nil || !usable(k) {
		c.garbage(ctx, kindAPIKey, key, raw)
		return apikey.Key{}, false
	}
	c.observe(kindAPIKey, resultHit)
	return k, true
}

// usable reports whether k can authenticate anyone: an entry that decodes
// to a key without a tenant or with a role nobody has is garbage.
func usable(k apikey.Key) bool {
	_, err := apikey.ParseRole(string(k.Role))
	return err == nil && apikey.ValidTenant(k.Tenant) && k.ID != ""
}

func (c *Cache) apiKeyKey(keyHash []byte) string {
	return c.cfg.Prefix + layout + "key:" + hex.EncodeToString(keyHash)
}
