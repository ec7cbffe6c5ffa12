package operation

import (
	"context"
	"slices"
	"sync"

	"github.com/tokend/tokend/db"
)

// maxCached and maxCachedBytes bound a Cache, in entries and in the bytes
// of its strings (a policy's ignored fields can be long); past either, the
// cache starts over. Starting over costs one lookup per operation in use.
const (
	maxCached      = 10_000
	maxCachedBytes = 4 << 20
)

// Cache keeps policies in process, so that issuing a token costs no policy
// lookup. Its entries may be stale: whoever writes on the strength of one
// must check its Version in the same statement, as intent's insert does, and
// call Forget and look again when the check fails. Unknown operations are
// not cached, so one declared a moment ago is found at once.
//
// A Cache is safe for concurrent use. The zero value is not usable; call
// NewCache.
type Cache struct {
	mu    sync.RWMutex
	m     map[cacheKey]Policy
	bytes int // an estimate of what m holds
}

type cacheKey struct{ tenant, name string }

// NewCache returns an empty Cache.
func NewCache() *Cache { return &Cache{m: map[cacheKey]Policy{}} }

// Get returns tenant's policy for operation name from the cache, or else
// reads it with Get and caches it. A Cache is used with one Handlers.
func (c *Cache) Get(ctx context.Context, q db.DBTX, tenant, name string, h Handlers) (Policy, error) {
	k := cacheKey{tenant, name}
	c.mu.RLock()
	p, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return clonePolicy(p), nil
	}
	p, err := Get(ctx, q, tenant, name, h)
	if err != nil {
		return Policy{}, err
	}
	c.store(k, p)
	return p, nil
}

func (c *Cache) store(k cacheKey, p Policy) {
	size := policySize(k, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[k]; ok {
		c.bytes -= policySize(k, old)
	}
	if len(c.m) >= maxCached || c.bytes+size > maxCachedBytes {
		clear(c.m)
		c.bytes = 0
	}
	c.m[k] = clonePolicy(p)
	c.bytes += size
}

// Forget drops tenant's cached policy for operation name.
func (c *Cache) Forget(tenant, name string) {
	k := cacheKey{tenant, name}
	c.mu.Lock()
	if old, ok := c.m[k]; ok {
		c.bytes -= policySize(k, old)
		delete(c.m, k)
	}
	c.mu.Unlock()
}

// clonePolicy keeps callers from sharing the cached IgnoredFields.
func clonePolicy(p Policy) Policy {
	p.IgnoredFields = slices.Clone(p.IgnoredFields)
	return p
}

// policySize estimates the bytes an entry holds: its strings and a fixed
// allowance for the rest.
func policySize(k cacheKey, p Policy) int {
	n := 128 + len(k.tenant) + len(k.name) + len(p.Name) + len(p.OnLeaseExpiry) + len(p.Mode)
	for _, f := range p.IgnoredFields {
		n += 16 + len(f)
	}
	return n
}
