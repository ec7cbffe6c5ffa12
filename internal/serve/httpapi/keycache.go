package httpapi

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// DefaultKeyCacheTTL is Config.KeyCacheTTL's default.
const DefaultKeyCacheTTL = time.Second

// maxCachedKeys and maxCachedKeyBytes bound the in-process cache; past
// either, the cache starts over. An entry's size is estimated from the
// lengths of its strings plus keyEntryOverhead; the strings come from
// Postgres (a key id, a tenant name, a role), so the count bound alone
// keeps it to a few MB, and the byte bound makes that a stated limit.
const (
	maxCachedKeys     = 10_000
	maxCachedKeyBytes = 4 << 20
	keyEntryOverhead  = 160
)

// keyCache remembers API-key resolutions in process for a short while, so a
// busy client costs no lookup per request. Only successes are kept: a key
// that fails is asked about again every time. Without word of revocations
// (Server.ForgetKey), the TTL bounds how long this instance keeps accepting
// a key revoked elsewhere.
type keyCache struct {
	ttl     time.Duration
	resolve func(ctx context.Context, presented string) (apikey.Key, error)

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedKey
	// gen counts drops. A resolution is kept only if no drop happened
	// since before it started: one that read the key before a revocation
	// must not put back what the revocation's drop took out.
	gen   uint64
	bytes int // estimated size of entries
	// swept is when expired entries were last dropped. A write sweeps
	// when a TTL has passed since, so an entry outlives its TTL by at
	// most one TTL plus the wait for the next write, and the sweeps cost
	// O(1) amortised per write.
	swept time.Time
}

type cachedKey struct {
	key     apikey.Key
	expires time.Time
	size    int
}

func keySize(k apikey.Key) int {
	return keyEntryOverhead + len(k.ID) + len(k.Tenant) + len(k.Role)
}

func newKeyCache(ttl time.Duration, resolve func(context.Context, string) (apikey.Key, error)) *keyCache {
	return &keyCache{ttl: ttl, resolve: resolve, entries: map[[sha256.Size]byte]cachedKey{}}
}

// authenticate resolves presented, from memory when it was resolved less
// than ttl ago. Keys are held by their hash, never as presented.
func (c *keyCache) authenticate(ctx context.Context, presented string) (apikey.Key, error) {
	h := sha256.Sum256([]byte(presented))
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[h]
	gen := c.gen
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.key, nil
	}
	k, err := c.resolve(ctx, presented)
	if err != nil {
		return apikey.Key{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return k, nil // a drop happened meanwhile: serve this request, keep nothing
	}
	if now.Sub(c.swept) >= c.ttl {
		for h, e := range c.entries {
			if !now.Before(e.expires) {
				c.dropLocked(h, e)
			}
		}
		c.swept = now
	}
	n := keySize(k)
	if old, ok := c.entries[h]; ok {
		c.dropLocked(h, old)
	}
	if len(c.entries) >= maxCachedKeys || c.bytes+n > maxCachedKeyBytes {
		clear(c.entries)
		c.bytes = 0
	}
	c.entries[h] = cachedKey{key: k, expires: now.Add(c.ttl), size: n}
	c.bytes += n
	return k, nil
}

func (c *keyCache) dropLocked(h [sha256.Size]byte, e cachedKey) {
	delete(c.entries, h)
	c.bytes -= e.size
}

// forget drops the resolution of the key whose SHA-256 is keyHash, and
// keeps any resolution in flight from being remembered.
func (c *keyCache) forget(keyHash []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(keyHash) == sha256.Size {
		if e, ok := c.entries[[sha256.Size]byte(keyHash)]; ok {
			c.dropLocked([sha256.Size]byte(keyHash), e)
		}
	}
}

// forgetAll drops every resolution, and keeps any in flight from being
// remembered.
func (c *keyCache) forgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
	c.bytes = 0
}

// ForgetKey drops every cached resolution of the API key whose SHA-256 is
// keyHash (api_keys.key_hash), in Redis (Config.Cache) and in process, so
// that the key is refused from the next request on. Call it once the key's
// revocation has committed, e.g. from apikey.Watch; it is idempotent.
func (s *Server) ForgetKey(ctx context.Context, keyHash []byte) {
	// Redis first: a request that misses in process after the drop below
	// must not find the key in Redis and remember it again.
	s.cache.InvalidateKey(context.WithoutCancel(ctx), keyHash)
	if s.keys != nil {
		s.keys.forget(keyHash)
	}
}

// ForgetAllKeys drops every API-key resolution held in process, for when
// revocations may have been missed (apikey.Watch's reset). Redis entries,
// which cannot be listed, stay until their TTL (cache.Config.KeyTTL).
func (s *Server) ForgetAllKeys() {
	if s.keys != nil {
		s.keys.forgetAll()
	}
}
