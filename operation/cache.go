package operation

import (
	"context"
	"slices"
	"sync"
)

// maxCached bounds a Cache; past it, the cache starts over.
const maxCached = 10_000

// Cache keeps policies in process, so that issuing a token costs no policy
// lookup. Its entries may be stale: whoever writes on the strength of one
// must check its Version in the same statement, as intent's insert does, and
// call Forget and look again when the check fails. Unknown operations are
// not cached, so one declared a moment ago is found at once.
//
// A Cache is safe for concurrent use. The zero value is not usable; call
// NewCache.
type Cache struct {
	mu sync.RWMutex
	m  map[cacheKey]Policy
}

type cacheKey struct{ tenant, name string }

// NewCache returns an empty Cache.
func NewCache() *Cache { return &Cache{m: map[cacheKey]Policy{}} }

// Get returns tenant's policy for operation name from the cache, or else
// reads it with Get and caches it.
func (c *Cache) Get(ctx context.Context, q Querier, tenant, name string) (Policy, error) {
	k := cacheKey{tenant, name}
	c.mu.RLock()
	p, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return clonePolicy(p), nil
	}
	p, err := Get(ctx, q, tenant, name)
	if err != nil {
		return Policy{}, err
	}
	c.mu.Lock()
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	c.m[k] = clonePolicy(p)
	c.mu.Unlock()
	return p, nil
}

// Forget drops tenant's cached policy for operation name.
func (c *Cache) Forget(tenant, name string) {
	c.mu.Lock()
	delete(c.m, cacheKey{tenant, name})
	c.mu.Unlock()
}

// clonePolicy keeps callers from sharing the cached IgnoredFields.
func clonePolicy(p Policy) Policy {
	p.IgnoredFields = slices.Clone(p.IgnoredFields)
	return p
}
