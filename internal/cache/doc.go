// Package cache keeps lookups in Redis so that repeated reads spare Postgres:
// tokens by id (GET /v1/tokens/{id}, operator inspect), the spends a token's
// secret hash is known to be refused for (revoked, expired), and what an API
// key resolves to.
//
// Redis is a cache and nothing more. It never decides a spend: a cached token
// is shown, never spent, and the only verdict it gives on a spend is a
// rejection for a state no token ever leaves. Postgres stays the arbiter.
//
// Every entry is written with a version, and a write only replaces an entry
// whose version is not greater (one Lua script, so the check and the write
// are atomic). A token's version, generation*10 plus a rank of its state,
// grows with every transition, and after each commit the caller invalidates
// by writing a tombstone that carries the new version. A reader that read
// Postgres before the commit and writes its result after the tombstone is
// refused, so a late write of an old row never wins over a newer one.
//
// The cache fails open. Errors from Redis are counted, never returned:
// every lookup then goes to its loader. Short timeouts bound each call, and
// a circuit breaker stops calling Redis after consecutive failures, so with
// Redis down or slow requests go to Postgres without waiting on Redis each
// time; after a cool-down one call probes Redis and closes the breaker again
// if it answers. Status reports "degraded" meanwhile, for /readyz.
//
// A lost invalidation (Redis failing right after a commit) leaves an old
// entry in place until its TTL, which is why TTLs are short: that is the
// bound on how stale a read can be. Tokens the sweeper expires, lapses or
// purges are not invalidated one by one; the same bound applies.
//
// A token in a terminal state is kept in process as well (Config.LocalTTL)
// and served from there without a call to Redis, whose GET costs about as
// much as Postgres's lookup by primary key. Such a token never changes
// again; its row only goes when it is purged after its RetainUntil, and the
// copy is dropped a minute before that. So the copy needs no invalidation
// from other instances. Tokens that may still change are never kept in
// process.
//
// A Cache made from a Config without a URL, and a nil *Cache, cache nothing:
// every call goes straight to its loader.
package cache
