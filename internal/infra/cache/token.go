package cache

import (
	"context"
	"encoding/json"
	"time"

	"github.com/tokend/tokend/token"
)

// Get returns tenant's token id from the cache. ok is false when the cache
// has no usable entry, is off, or cannot reach Redis; the caller then reads
// Postgres, preferably through GetOrLoad so that the result is cached.
func (c *Cache) Get(ctx context.Context, tenant, id string) (rec token.Record, ok bool) {
	if c.off() || !token.ValidID(id) {
		return token.Record{}, false
	}
	if rec, ok := c.localToken(tenant, id); ok {
		return rec, true
	}
	return c.readToken(ctx, tenant, id, c.local.epoch(tenant, id))
}

// GetOrLoad returns tenant's token id from the cache, or else from load,
// whose result it caches. Concurrent calls for the same token share one
// lookup and at most one load, but a call never shares one that had begun
// when it arrived (see flights): what it returns was read after it began.
// Callers get the same Record, whose slices and pointers they must treat
// as read-only.
//
// The Record holds what a token read shows and no more (see shown): no
// stored result body or status, no payload digest, no intent id, whether
// it came from the cache or from load. Replays read those from Postgres.
//
// A token in a terminal state, once read, is also kept in process (see
// Config.LocalTTL) and served from there without a call to Redis; the
// record is shared read-only in the same way.
//
// Errors from load are returned as they are, and nothing is cached for
// them, not even token.ErrNotFound: a token that is not there yet may be
// issued any moment. An id that is not a token id's shape is passed to
// load without touching Redis.
func (c *Cache) GetOrLoad(ctx context.Context, tenant, id string, load func(context.Context) (token.Record, error)) (token.Record, error) {
	if c.off() || !token.ValidID(id) {
		rec, err := load(ctx)
		return shown(rec), err
	}
	if rec, ok := c.localToken(tenant, id); ok {
		return rec, nil
	}
	key := c.tokenKey(tenant, id)
	if c.changing.has(key) {
		// Redis cannot answer, and a load shared with other callers would
		// only queue them: load as without a cache.
		c.observe(kindToken, resultSkipped)
		return c.loadToken(ctx, tenant, id, key, time.Now(), c.local.epoch(tenant, id), load)
	}
	return shared(ctx, &c.flights, key, func(ctx context.Context) (token.Record, error) {
		began, epoch := time.Now(), c.local.epoch(tenant, id)
		if rec, ok := c.readToken(ctx, tenant, id, epoch); ok {
			return rec, nil
		}
		return c.loadToken(ctx, tenant, id, key, began, epoch, load)
	})
}

// loadToken loads tenant's token id, for a read that began at began and
// epoch, and caches it if it is settled; if not, its next reads skip Redis
// for a moment (changing).
func (c *Cache) loadToken(ctx context.Context, tenant, id, key string, began time.Time, epoch uint64, load func(context.Context) (token.Record, error)) (token.Record, error) {
	rec, err := load(ctx)
	if err != nil {
		return shown(rec), err
	}
	rec = shown(rec)
	if !settled(rec) {
		c.changing.mark(key)
		return rec, nil
	}
	c.changing.forget(key)
	if fresh(began, c.cfg.TokenTTL) {
		c.fillToken(ctx, tenant, id, rec)
	}
	c.keep(tenant, id, rec, epoch)
	return rec, nil
}

// fresh reports whether a read that began at began may still fill an entry
// whose tombstones live ttl. A tombstone that must refuse the fill was
// written after the commit the read's load missed, hence after began, and
// lives ttl from then: a fill that reaches Redis within ttl of began meets
// it. Half of ttl is left for the fill's own trip to Redis.
func fresh(began time.Time, ttl time.Duration) bool {
	return time.Since(began) < ttl/2
}

// shown returns rec with only what a token read shows (GET
// /v1/tokens/{id}): no result body or status, which spends replay from
// Postgres, no payload digest and no intent id. Neither Redis nor this
// process's memory holds more than this.
func shown(rec token.Record) token.Record {
	rec.ResultBody, rec.ResultStatus, rec.PayloadDigest, rec.IntentID = nil, 0, nil, ""
	return rec
}

// servable reports whether rec may be served or cached now: not once its
// row may be purged (see purgeMargin).
func (c *Cache) servable(rec token.Record) bool {
	return c.now().Before(rec.RetainUntil.Add(-purgeMargin))
}

// fillToken caches rec, loaded as tenant's token id, unless a newer entry
// or tombstone is there. The entry lives no longer than the row is sure to.
func (c *Cache) fillToken(ctx context.Context, tenant, id string, rec token.Record) {
	v, ok := version(rec.State, rec.Generation)
	// A record of another token would be served under this one's key. A
	// token that may still change is never cached (see settled).
	if !ok || rec.Tenant != tenant || rec.ID != id || !settled(rec) {
		return
	}
	ttl := min(c.cfg.TokenTTL, rec.RetainUntil.Add(-purgeMargin).Sub(c.now()))
	if ttl <= 0 {
		return
	}
	if body, err := json.Marshal(shown(rec)); err == nil {
		c.put(ctx, kindToken, c.tokenKey(tenant, id), v, body, ttl)
	}
}

// Invalidate drops the cached copy of tenant's token id. Call it after every
// committed change to the token, with the state and generation the change
// left it in: it writes a tombstone of that version, which refuses the
// entry a concurrent GetOrLoad may still write from a read of before the
// commit, yet lets in one that read the committed row.
//
// A negative generation means the caller does not know it (an atomic
// spend's consume.Response carries none). The tombstone then refuses every
// entry until it expires: a few more misses rather than a stale read.
//
// Call it before answering the request that made the change: a read that
// begins after the tombstone is written cannot see the state from before
// (see the package doc). Invalidate returns nothing: when Redis fails, the
// entry it meant to drop may stay until its TTL for other processes, the
// bound on staleness the cache is built on; this process skips Redis for
// the token meanwhile.
//
// It drops this process's copy of a terminal token too. No change of a
// token needs that (a terminal token does not change), and other
// instances keep theirs; it is a defence for what may yet come to call
// Invalidate, such as a purge of single tokens.
func (c *Cache) Invalidate(ctx context.Context, tenant, id string, state token.State, generation int64) {
	if c.off() || !token.ValidID(id) {
		return
	}
	c.local.drop(tenant, id)
	v, ok := version(state, generation)
	if !ok {
		v = maxVersion
	}
	c.tombstone(ctx, kindToken, c.tokenKey(tenant, id), v, c.cfg.TokenTTL)
	// Again, after the tombstone: a read that began before it may have
	// found the old entry and must not keep it.
	c.local.drop(tenant, id)
}

// readToken reads tenant's token id from Redis. Only an authentic record
// of that tenant and id, whose version matches its state and generation,
// is served; a forged entry is counted and logged, anything else is
// garbage. A record whose row may be purged is not served. A terminal
// record served is kept in process, unless a drop happened since epoch.
func (c *Cache) readToken(ctx context.Context, tenant, id string, epoch uint64) (token.Record, bool) {
	key := c.tokenKey(tenant, id)
	if c.unsure.has(key) {
		c.observe(kindToken, resultSkipped)
		return token.Record{}, false
	}
	raw, ok := c.get(ctx, kindToken, key)
	if !ok {
		return token.Record{}, false
	}
	v, body, ok := c.unseal(key, raw)
	if !ok {
		c.forged(ctx, kindToken, key, raw)
		return token.Record{}, false
	}
	if body == "" {
		c.observe(kindToken, resultMiss) // a tombstone
		return token.Record{}, false
	}
	var rec token.Record
	if json.Unmarshal([]byte(body), &rec) != nil || rec.Tenant != tenant || rec.ID != id || !hasVersion(rec, v) {
		c.garbage(ctx, kindToken, key, raw)
		return token.Record{}, false
	}
	if !settled(rec) || !c.servable(rec) {
		c.observe(kindToken, resultMiss)
		return token.Record{}, false
	}
	c.observe(kindToken, resultHit)
	c.keep(tenant, id, rec, epoch)
	return rec, true
}

// keep copies rec, read as tenant's token id by a read that began at
// epoch, into the in-process layer if it is terminal, but only while the
// breaker is closed. With Redis failing, new lookups go to Postgres, as
// StatusDegraded says, and the copies held from before are all a hit can
// come from; so hits resume only once Redis answers again.
func (c *Cache) keep(tenant, id string, rec token.Record, epoch uint64) {
	if c.breaker.current() == stateClosed {
		c.local.put(tenant, id, rec, epoch)
	}
}

// localToken returns tenant's token id from the in-process layer, counted
// as a hit, if it holds a live copy.
func (c *Cache) localToken(tenant, id string) (token.Record, bool) {
	rec, ok := c.local.get(tenant, id)
	if ok {
		c.observe(kindToken, resultHit)
	}
	return rec, ok
}

// settled reports whether rec is in a state no token leaves (consumed,
// failed, revoked, expired), the only records Redis is believed about. An
// entry of such a record cannot be older than a change, for there is none
// after it: a Redis that lost writes or deletes (a failover, a restart
// from an old snapshot, a dropped tombstone) can at worst hold fewer of
// them. A token that may still change is read from Postgres every time;
// an entry of one, written by an earlier version of tokend or restored
// from a snapshot, is a miss however authentic.
func settled(rec token.Record) bool { return rec.State.Terminal() }

func hasVersion(rec token.Record, v int64) bool {
	rv, ok := version(rec.State, rec.Generation)
	return ok && rv == v
}

// tokenKey is where tenant's token id is cached. The id has no colon (it
// passed token.ValidID), so no tenant name can make two keys collide.
func (c *Cache) tokenKey(tenant, id string) string {
	return c.cfg.Prefix + layout + "tok:" + tenant + ":" + id
}
