package cache

import (
	"sync"
	"time"
)

// maxUnsure bounds how many keys unsure tracks one by one; past it, every
// read skips Redis until the newest mark runs out.
const maxUnsure = 10_000

// unsure remembers keys whose invalidation this process could not write
// (Redis failed, or the breaker was open): Redis may still hold the entry
// from before the change, until its TTL. Reads of such a key on this
// process skip Redis and load, so that this process at least never shows
// the change undone; fills still go, and the first one from a read after
// the change replaces the old entry. Other processes are bound by the TTL,
// as the package doc says.
type unsure struct {
	mu   sync.Mutex
	keys map[string]time.Time // until when reads of the key skip Redis
	all  time.Time            // until when every read skips Redis
}

// mark makes reads of key skip Redis for ttl.
func (u *unsure) mark(key string, ttl time.Duration) {
	now := time.Now()
	until := now.Add(ttl)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.keys == nil {
		u.keys = map[string]time.Time{}
	}
	if len(u.keys) >= maxUnsure {
		for k, t := range u.keys {
			if !now.Before(t) {
				delete(u.keys, k)
			}
		}
	}
	if len(u.keys) >= maxUnsure {
		clear(u.keys)
		u.all = until
		return
	}
	u.keys[key] = until
}

// has reports whether reads of key must skip Redis now.
func (u *unsure) has(key string) bool {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if now.Before(u.all) {
		return true
	}
	t, ok := u.keys[key]
	if ok && !now.Before(t) {
		delete(u.keys, key)
		return false
	}
	return ok
}
