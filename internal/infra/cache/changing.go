package cache

import (
	"sync"
	"time"
)

// changingTTL is how long a token read in a state it can leave is taken
// to still be in one; maxChanging bounds how many are remembered.
const (
	changingTTL = time.Second
	maxChanging = 10_000
)

// changing remembers tokens this process last loaded in a state they can
// leave (issued, pending, unknown). Redis never answers for such a token
// (settled), so their next reads go to Postgres without asking Redis
// first. It only saves a Redis round trip: a token that was settled
// meanwhile is loaded from Postgres, as a miss would be, and its read
// fills Redis and forgets the mark.
type changing struct {
	mu   sync.Mutex
	keys map[string]time.Time // until when reads of the key skip Redis
}

func (c *changing) mark(key string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil || len(c.keys) >= maxChanging {
		c.keys = map[string]time.Time{} // past the bound, start over: a few more Redis misses
	}
	c.keys[key] = now.Add(changingTTL)
}

func (c *changing) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, key)
}

func (c *changing) has(key string) bool {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.keys[key]
	if ok && !now.Before(t) {
		delete(c.keys, key)
		return false
	}
	return ok
}
