package cache

import (
	"sync"
	"time"

	"github.com/tokend/tokend/internal/clock"
	"github.com/tokend/tokend/token"
)

// localMargin is how long before a token's RetainUntil its in-process copy
// is dropped at the latest. The purge that deletes the row judges
// RetainUntil by the database's clock, the copy's lifetime is judged by
// this process's clock: were the process clock behind, a copy kept until
// RetainUntil itself could be served after the row is gone. A minute is
// far more skew than NTP leaves, and four times the skew the clock-skew
// fault test runs tokend with.
const localMargin = time.Minute

// local keeps token records in terminal states (token.State.Terminal) in
// process, in front of Redis. Such a record never changes again: no action
// moves a token out of a terminal state (token.Next), and the row is only
// deleted once the database's now() has passed its RetainUntil, by a purge
// or by a re-issue of its intent. A copy therefore needs no invalidation
// from other instances; it is kept until LocalTTL has passed or
// localMargin before RetainUntil, whichever comes first.
//
// It holds at most limit entries. A put into a full map evicts an arbitrary
// entry: the first one a range over the map yields, which Go starts at a
// random place. That is O(1) amortised, needs no bookkeeping on the read
// path, and a hot token evicted by chance costs one Redis read to come
// back. Expired entries are dropped when a read finds them, or evicted.
//
// Records are shared read-only between the callers that get them, as
// GetOrLoad documents for its shared lookups.
type local struct {
	ttl   time.Duration
	limit int              // entries held at most
	now   func() time.Time // a test's clock, or clock.Now (skewed like the process in a tokend_faketime build)

	mu      sync.RWMutex
	entries map[localKey]localEntry
}

type localKey struct{ tenant, id string }

type localEntry struct {
	rec   token.Record
	until time.Time // served while now is before it
}

// newLocal returns a layer that keeps entries for ttl, at most limit of
// them, or nil, which keeps nothing, for a negative ttl.
func newLocal(ttl time.Duration, limit int) *local {
	if ttl < 0 {
		return nil
	}
	return &local{ttl: ttl, limit: limit, now: clock.Now, entries: make(map[localKey]localEntry)}
}

// get returns tenant's token id if a live copy of it is held.
func (l *local) get(tenant, id string) (token.Record, bool) {
	if l == nil {
		return token.Record{}, false
	}
	k := localKey{tenant, id}
	l.mu.RLock()
	e, ok := l.entries[k]
	l.mu.RUnlock()
	if !ok {
		return token.Record{}, false
	}
	if now := l.now(); !now.Before(e.until) {
		l.mu.Lock()
		// Another goroutine may have put a fresh copy since.
		if cur, ok := l.entries[k]; ok && !now.Before(cur.until) {
			delete(l.entries, k)
		}
		l.mu.Unlock()
		return token.Record{}, false
	}
	return e.rec, true
}

// put keeps rec, read as tenant's token id, if it is terminal and has
// longer to live than localMargin. Any other record is ignored.
func (l *local) put(tenant, id string, rec token.Record) {
	if l == nil || !rec.State.Terminal() || rec.Tenant != tenant || rec.ID != id {
		return
	}
	now := l.now()
	until := now.Add(l.ttl)
	if purge := rec.RetainUntil.Add(-localMargin); purge.Before(until) {
		until = purge
	}
	if !now.Before(until) {
		return
	}
	k := localKey{tenant, id}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[k]; !ok && len(l.entries) >= l.limit {
		for victim := range l.entries {
			delete(l.entries, victim)
			break
		}
	}
	l.entries[k] = localEntry{rec: rec, until: until}
}

// drop forgets tenant's token id.
func (l *local) drop(tenant, id string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.entries, localKey{tenant, id})
	l.mu.Unlock()
}
