// Package cache keeps lookups in Redis so that repeated reads spare Postgres:
// tokens in a terminal state by id (GET /v1/tokens/{id}), and the spends a
// token's secret hash is known to be refused for (revoked, expired).
//
// # Only facts that can no longer change
//
// Redis can lose writes and deletes: a failover to a replica that missed
// them (replication is asynchronous), a restart from an old snapshot, a
// tombstone that was never written. So it holds only facts no change can
// make false: a token in a state no token leaves (consumed, failed,
// revoked, expired; see settled), and refusals for such states. A token
// that may still change is read from Postgres every time, and an entry of
// one found in Redis (an earlier version's, or restored) is a miss. An API
// key's resolution is never cached here (a revocation changes it): see
// GetOrLoadKey. Whatever Redis loses or brings back, a read that begins
// after a change was answered cannot show the state before it. The
// versions, tombstones and compare-and-set fills below remain, a second
// line that keeps even a lost-write-free Redis from serving a late fill.
//
// Redis is a cache and nothing more. It never decides a spend: a cached token
// is shown, never spent, and the only verdict it gives on a spend is a
// rejection for a state no token ever leaves. Postgres stays the arbiter.
//
// # What Redis holds, and why it cannot lie
//
// A token entry holds what a token read shows and no more: no stored result
// body or status (replays read those from Postgres), no payload digest, no
// intent id. The in-process copies hold the same.
//
// Every entry, tombstones included, carries an HMAC-SHA256 of its Redis key,
// version and body under Config.MACKey, which tokend derives from the server
// key (MACKey). A reader checks it before anything else: an entry that fails
// (written by someone who can reach Redis but lacks the server key, or an
// entry copied to another key) is a miss, counted as "forged", logged as a
// warning with the request id (never the value), and removed. So a Redis
// writer can make lookups miss, never make an API key resolve or a spend be
// refused.
//
// # Read-your-writes: the fill/invalidate protocol
//
// The promise: a read that begins after a committed change was answered
// (a spend, a report, a revoke, a reconcile, a purge, an API-key
// revocation) never returns the state from before it, on this process or
// another sharing the Redis, however slowly Redis answers. Four rules keep
// it.
//
//  1. Versions and tombstones. A token's version, generation*10 plus a rank
//     of its state, grows with every transition. After each commit, and
//     before the response is written, the handler calls Invalidate, which
//     writes a tombstone carrying the new version and waits for Redis to
//     take it. A read that begins after the response thus finds, in Redis,
//     the tombstone or an entry at least as new.
//  2. Compare-and-set fills. An entry is written by one Lua script that
//     refuses to replace an entry of greater version. A read that loaded
//     the row before the commit and fills after the tombstone is refused,
//     so a late fill of an old row never wins. A fill is sent only within
//     half a TTL of its read's start: the tombstone it must meet was
//     written after that start and lives a whole TTL.
//  3. Coalescing only forward. Concurrent reads of one key share one Redis
//     lookup and at most one load, but a caller only joins a read that has
//     not started yet (see flights); a read that started before the caller
//     arrived may have seen Redis or Postgres before the change. So each
//     key has one read running and at most one waiting, which the callers
//     arriving meanwhile join.
//  4. In process. Invalidate drops this process's copy and bumps a
//     per-key (striped) invalidation counter, before and after writing the
//     tombstone; a read that began before a bump keeps nothing. When the
//     tombstone cannot be written (Redis failing, breaker open), reads of
//     that key on this process skip Redis until the entry's TTL has run
//     out, and their fill, a newer version, replaces the old entry for
//     everyone.
//
// Purges and intent re-issues delete only rows whose RetainUntil the
// database's clock has passed. The cache never serves or keeps a record
// less than a minute (purgeMargin, far more than clock skew) before its
// RetainUntil, so a purge needs no invalidation and is never seen undone.
//
// A revoked API key gets a tombstone of version 1, for instances of
// earlier versions that still read resolutions from Redis.
//
// # Failing open
//
// Errors from Redis are counted, never returned: every lookup then goes to
// its loader. Short timeouts bound each call, and a circuit breaker stops
// calling Redis after consecutive failures, so with Redis down or slow
// requests go to Postgres without waiting on Redis each time; after a
// cool-down one call probes Redis and closes the breaker again if it
// answers. Probe, which /readyz calls, PINGs Redis at most once per
// Config.ProbeInterval whether or not there is traffic, and feeds the
// breaker too.
//
// # In process
//
// A token in a terminal state is kept in process as well (Config.LocalTTL)
// and served from there without a call to Redis, whose GET costs about as
// much as Postgres's lookup by primary key. Such a token never changes
// again, so the copy needs no invalidation from other instances. The layer
// is bounded in entries (Config.LocalMax) and in bytes
// (Config.LocalMaxBytes), and a janitor drops expired copies without
// waiting for a read. Tokens that may still change are never kept in
// process.
//
// A Cache made from a Config without a URL, and a nil *Cache, cache nothing:
// every call goes straight to its loader.
package cache
