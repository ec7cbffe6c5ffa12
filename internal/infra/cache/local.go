package cache

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokend/tokend/internal/infra/clock"
	"github.com/tokend/tokend/token"
)

// purgeMargin is how long before a token's RetainUntil the cache stops
// serving or keeping it, in Redis and in process. The purge that deletes
// the row (and the re-issue of its intent that replaces it) judges
// RetainUntil by the database's clock, the cache by this process's clock:
// were the process clock behind, a copy kept until RetainUntil itself could
// be served after the row is gone. A minute is far more skew than NTP
// leaves, and four times the skew the clock-skew fault test runs tokend
// with. So no read ever shows a token a purge has answered for.
const purgeMargin = time.Minute

// entryOverhead is what a kept copy costs besides the bytes of its
// strings: the map slot, the Record's fixed fields, the times and the
// headers of its strings and slices, rounded up.
const entryOverhead = 512

// local keeps token records in terminal states (token.State.Terminal) in
// process, in front of Redis. Such a record never changes again: no action
// moves a token out of a terminal state (token.Next), and the row is only
// deleted once the database's now() has passed its RetainUntil, by a purge
// or by a re-issue of its intent. A copy therefore needs no invalidation
// from other instances; it is kept until LocalTTL has passed or
// purgeMargin before RetainUntil, whichever comes first.
//
// It holds at most limit entries and about maxBytes bytes (see size); a
// copy holds only what a token read shows (shown), never the stored result
// body. A put into a full map evicts arbitrary entries: the first ones a
// range over the map yields, which Go starts at a random place. That is
// O(1) amortised, needs no bookkeeping on the read path, and a hot token
// evicted by chance costs one Redis read to come back. Expired entries are
// dropped by a janitor every sweepEvery, by a read that finds them, or by
// eviction: an idle process holds nothing past its TTL for long.
//
// Records are shared read-only between the callers that get them, as
// GetOrLoad documents for its shared lookups.
type local struct {
	ttl      time.Duration
	limit    int              // entries held at most
	maxBytes int64            // estimated bytes held at most
	now      func() time.Time // a test's clock, or clock.Now (skewed like the process in a tokend_faketime build)

	mu      sync.RWMutex
	entries map[localKey]localEntry
	bytes   int64 // sum of the entries' sizes

	// epochs count drops, by stripe of keys. A read notes its key's epoch
	// before it asks Redis or Postgres, and keeps its result only if no
	// drop of that stripe happened since: a read that began before an
	// invalidation never puts back what the invalidation took out.
	seed   maphash.Seed
	epochs [64]atomic.Uint64

	janitor, closing sync.Once
	done             chan struct{} // closed by close
}

type localKey struct{ tenant, id string }

type localEntry struct {
	rec   token.Record
	until time.Time // served while now is before it
	size  int64
}

// newLocal returns a layer that keeps entries for ttl, at most limit of
// them and about maxBytes bytes, or nil, which keeps nothing, for a
// negative ttl.
func newLocal(ttl time.Duration, limit int, maxBytes int64) *local {
	if ttl < 0 {
		return nil
	}
	return &local{ttl: ttl, limit: limit, maxBytes: maxBytes, now: clock.Now,
		entries: make(map[localKey]localEntry), seed: maphash.MakeSeed(), done: make(chan struct{})}
}

// size estimates what rec costs to keep.
func size(rec token.Record) int64 {
	return int64(entryOverhead + len(rec.Tenant) + len(rec.ID) + len(rec.Operation) + len(rec.IntentID) +
		len(rec.Subject) + len(rec.State) + len(rec.OperationID) + len(rec.PayloadDigest) + len(rec.ResultBody))
}

// epoch returns the drop count of tenant's token id's stripe, for put.
func (l *local) epoch(tenant, id string) uint64 {
	if l == nil {
		return 0
	}
	return l.stripe(tenant, id).Load()
}

func (l *local) stripe(tenant, id string) *atomic.Uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(tenant)
	h.WriteByte(0)
	h.WriteString(id)
	return &l.epochs[h.Sum64()%uint64(len(l.epochs))]
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
			l.deleteLocked(k, cur)
		}
		l.mu.Unlock()
		return token.Record{}, false
	}
	return e.rec, true
}

// put keeps rec, read as tenant's token id by a read that began at epoch,
// if it is terminal, has longer to live than purgeMargin, and no drop of
// its stripe happened since the read began. Any other record is ignored.
func (l *local) put(tenant, id string, rec token.Record, epoch uint64) {
	if l == nil || !rec.State.Terminal() || rec.Tenant != tenant || rec.ID != id {
		return
	}
	now := l.now()
	until := now.Add(l.ttl)
	if purge := rec.RetainUntil.Add(-purgeMargin); purge.Before(until) {
		until = purge
	}
	if !now.Before(until) {
		return
	}
	k, n := localKey{tenant, id}, size(rec)
	if n > l.maxBytes {
		return
	}
	l.startJanitor()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stripe(tenant, id).Load() != epoch {
		return // dropped since the read began
	}
	if old, ok := l.entries[k]; ok {
		l.deleteLocked(k, old)
	}
	for victim, e := range l.entries {
		if len(l.entries) < l.limit && l.bytes+n <= l.maxBytes {
			break
		}
		l.deleteLocked(victim, e)
	}
	l.entries[k] = localEntry{rec: rec, until: until, size: n}
	l.bytes += n
}

// drop forgets tenant's token id, and keeps a read begun before from
// putting it back.
func (l *local) drop(tenant, id string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.stripe(tenant, id).Add(1)
	if e, ok := l.entries[localKey{tenant, id}]; ok {
		l.deleteLocked(localKey{tenant, id}, e)
	}
	l.mu.Unlock()
}

func (l *local) deleteLocked(k localKey, e localEntry) {
	delete(l.entries, k)
	l.bytes -= e.size
}

// sweep drops every expired entry.
func (l *local) sweep() {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.entries {
		if !now.Before(e.until) {
			l.deleteLocked(k, e)
		}
	}
}

// sweepEvery is how often the janitor sweeps, at most: an expired copy
// outlives its TTL by no more than this.
const sweepEvery = 5 * time.Second

// startJanitor starts, once, the goroutine that sweeps l every sweepEvery
// (or its TTL, if shorter) until close. It is started by the first put,
// so that a layer nothing is kept in costs no goroutine.
func (l *local) startJanitor() {
	l.janitor.Do(func() {
		go func() {
			t := time.NewTicker(max(min(l.ttl, sweepEvery), 10*time.Millisecond))
			defer t.Stop()
			for {
				select {
				case <-t.C:
					l.sweep()
				case <-l.done:
					return
				}
			}
		}()
	})
}

// close stops the janitor, if it runs.
func (l *local) close() {
	if l != nil {
		l.closing.Do(func() { close(l.done) })
	}
}
