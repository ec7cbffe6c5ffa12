package httpapi

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/tokend/tokend/internal/apikey"
)

// DefaultKeyCacheTTL is Config.KeyCacheTTL's default.
const DefaultKeyCacheTTL = time.Second

// maxCachedKeys bounds the in-process cache; past it, the cache starts over.
const maxCachedKeys = 10_000

// keyCache remembers API-key resolutions in process for a short while, so a
// busy client costs no lookup per request. Only successes are kept: a key
// that fails is asked about again every time. The TTL bounds how long another
// instance keeps accepting a key revoked elsewhere.
type keyCache struct {
	ttl     time.Duration
	resolve func(ctx context.Context, presented string) (apikey.Key, error)

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedKey
}

type cachedKey struct {
	key     apikey.Key
	expires time.Time
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
	c.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.key, nil
	}
	k, err := c.resolve(ctx, presented)
	if err != nil {
		return apikey.Key{}, err
	}
	c.mu.Lock()
	if len(c.entries) >= maxCachedKeys {
		clear(c.entries)
	}
	c.entries[h] = cachedKey{key: k, expires: now.Add(c.ttl)}
	c.mu.Unlock()
	return k, nil
}
