package cache

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/infra/clock"
)

// Observer is told what the cache does, for metrics. Its methods are called
// concurrently, ObserveBreaker while the breaker is locked: they must be
// quick and must not call the Cache.
type Observer interface {
	// ObserveCache counts one Redis operation on an entry of kind "token",
	// "secret" or "apikey". A lookup ends in "hit", "miss", "garbage" (an
	// authentic entry that is unusable, or a key of another type: ignored
	// and removed), "forged" (an entry whose MAC does not check: ignored,
	// removed and logged), "error" (Redis failed) or "skipped" (the
	// breaker is open, this process could not write the key's last
	// invalidation, see unsure, or it just read the token in a state it
	// can leave, see changing).
	// A write is counted only when it fails, as "error". A token served
	// from the in-process copy (Config.LocalTTL) asks Redis nothing, yet is
	// counted as a "hit", so that the hit ratio stays the cache's as a
	// whole.
	ObserveCache(kind, result string)
	// ObserveBreaker reports the breaker's state when the Cache is made and
	// after each change: "closed", "open" or "half_open".
	ObserveBreaker(state string)
}

// Kinds of entry and results of an operation, as Observer receives them.
const (
	kindToken  = "token"
	kindSecret = "secret"
	kindAPIKey = "apikey"

	resultHit     = "hit"
	resultMiss    = "miss"
	resultGarbage = "garbage"
	resultForged  = "forged"
	resultError   = "error"
	resultSkipped = "skipped"
)

// Status is how the cache stands, for /readyz.
type Status string

// The statuses of a Cache.
const (
	// StatusOff: no Redis is configured; every lookup goes to Postgres.
	StatusOff Status = "off"
	// StatusOK: Redis is in use.
	StatusOK Status = "ok"
	// StatusDegraded: Redis failed and the breaker sends every lookup to
	// Postgres until a probe finds Redis answering again.
	StatusDegraded Status = "degraded"
)

// Cache caches token and API key lookups in Redis. It is safe for
// concurrent use.
type Cache struct {
	rdb     redis.UniversalClient // nil when the cache is off
	cfg     Config
	macKey  []byte   // seals and unseals
	oldMACs [][]byte // only unseal
	breaker *breaker
	flights flights
	local   *local           // terminal tokens in process; nil when off or disabled
	now     func() time.Time // judges RetainUntil; clock.Now
	probe   prober
	unsure  unsure // keys whose invalidation failed
	// changing: tokens last loaded in a state they can leave, whose reads
	// skip Redis for a moment (changing.go).
	changing changing
	// cluster is rdb when it is a Redis Cluster's client, else nil; its
	// watcher runs until stopWatch is called (cluster.go).
	cluster   *redis.ClusterClient
	stopWatch func()
}

// New returns a Cache configured by cfg. It does not contact Redis: a Redis
// that is down at start is dealt with like one that goes down later.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cache{cfg: cfg}
	if cfg.URL == "" {
		return c, nil
	}
	build, err := parseURL(cfg.URL, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	var onChange func(string)
	if cfg.Observer != nil {
		onChange = cfg.Observer.ObserveBreaker
		onChange(stateClosed)
	}
	c.breaker = newBreaker(cfg.BreakerThreshold, cfg.BreakerCooldown, onChange)
	c.rdb = build()
	if cfg.Hook != nil {
		c.rdb.AddHook(cfg.Hook)
	}
	c.now = clock.Now
	c.macKey, c.oldMACs = cfg.MACKey, cfg.PreviousMACKeys
	if len(c.macKey) == 0 {
		c.macKey = make([]byte, sha256.Size)
		_, _ = rand.Read(c.macKey)
	}
	c.local = newLocal(cfg.LocalTTL, cfg.LocalMax, cfg.LocalMaxBytes)
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		stop := make(chan struct{})
		c.cluster, c.stopWatch = cc, sync.OnceFunc(func() { close(stop) })
		go c.watchCluster(stop)
	}
	return c, nil
}

// Close stops the cache's background work and closes the connections to
// Redis.
func (c *Cache) Close() error {
	if c.off() {
		return nil
	}
	c.local.close()
	if c.stopWatch != nil {
		c.stopWatch()
	}
	return c.rdb.Close()
}

// Status reports how the cache stands.
func (c *Cache) Status() Status {
	switch {
	case c.off():
		return StatusOff
	case c.breaker.current() == stateClosed:
		return StatusOK
	}
	return StatusDegraded
}

// Healthy reports whether the cache works as configured: Redis is in use,
// or none is configured.
func (c *Cache) Healthy() bool { return c.Status() != StatusDegraded }

func (c *Cache) off() bool { return c == nil || c.rdb == nil }

// get reads the raw value at key. ok is false for a miss, a failure, an
// open breaker or a key of another type, each counted; a value that is
// returned is counted by the caller, once decoded.
func (c *Cache) get(ctx context.Context, kind, key string) (raw string, ok bool) {
	if !c.breaker.allow() {
		c.observe(kind, resultSkipped)
		return "", false
	}
	raw, err := c.rdb.Get(detach(ctx), key).Result()
	switch {
	case err == nil:
		c.breaker.success()
		return raw, true
	case errors.Is(err, redis.Nil):
		c.breaker.success()
		c.observe(kind, resultMiss)
	case isWrongType(err):
		c.breaker.success() // Redis answered; the key is what is wrong
		c.garbage(ctx, kind, key, "")
	default:
		c.failure()
		c.observe(kind, resultError)
	}
	return "", false
}

// put writes an entry of version v with body (nil for a tombstone) at key
// for ttl, unless the entry there has a greater version. It reports
// whether Redis answered: false when it failed or was not asked.
func (c *Cache) put(ctx context.Context, kind, key string, v int64, body []byte, ttl time.Duration) bool {
	if !c.breaker.allow() {
		return false
	}
	err := setScript.Run(detach(ctx), c.rdb, []string{key}, v, c.seal(key, v, body), max(ttl.Milliseconds(), 1)).Err()
	c.done(kind, err)
	return err == nil
}

// tombstone writes a tombstone of version v at key for ttl. When it cannot,
// reads of key on this process skip Redis for ttl (see unsure).
func (c *Cache) tombstone(ctx context.Context, kind, key string, v int64, ttl time.Duration) {
	if !c.put(ctx, kind, key, v, nil, ttl) {
		c.unsure.mark(key, ttl)
	}
}

// garbage counts an unusable entry and removes it, so that the fill after
// the load can take its place (a garbage entry that looks like it has a
// high version would refuse it). raw is the value seen, "" for a key of
// another type.
func (c *Cache) garbage(ctx context.Context, kind, key, raw string) {
	c.observe(kind, resultGarbage)
	c.remove(ctx, kind, key, raw)
}

// forged counts and logs an entry whose MAC does not check, and removes it,
// for the same reason as garbage. The log names the kind of entry and the
// request, never the value.
func (c *Cache) forged(ctx context.Context, kind, key, raw string) {
	c.observe(kind, resultForged)
	attrs := []slog.Attr{slog.String("kind", kind)}
	if c.cfg.RequestID != nil {
		attrs = append(attrs, slog.String("request_id", c.cfg.RequestID(ctx)))
	}
	c.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "cache entry failed authentication; ignored and removed", attrs...)
	c.remove(ctx, kind, key, raw)
}

// remove deletes key if it still holds raw.
func (c *Cache) remove(ctx context.Context, kind, key, raw string) {
	if !c.breaker.allow() {
		return
	}
	c.done(kind, delScript.Run(detach(ctx), c.rdb, []string{key}, raw).Err())
}

// done records the outcome of a write with the breaker and the observer.
func (c *Cache) done(kind string, err error) {
	if err != nil {
		c.failure()
		c.observe(kind, resultError)
		return
	}
	c.breaker.success()
}

func (c *Cache) observe(kind, result string) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.ObserveCache(kind, result)
	}
}

// detach keeps a Redis call going when the caller's context ends. The
// timeouts bound every call anyway, and a write cut short when a client
// hangs up right after a commit would lose the invalidation.
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}
