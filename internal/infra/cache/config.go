package cache

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for the fields of Config left zero.
const (
	DefaultPrefix           = "tokend:"
	DefaultTokenTTL         = 30 * time.Second
	DefaultKeyTTL           = 10 * time.Second
	DefaultTimeout          = 50 * time.Millisecond
	DefaultBreakerThreshold = 5
	DefaultBreakerCooldown  = 5 * time.Second
	DefaultLocalTTL         = 30 * time.Second
	DefaultLocalMax         = 10_000
	DefaultLocalMaxBytes    = 8 << 20
	DefaultProbeInterval    = time.Second
	DefaultProbeTimeout     = 500 * time.Millisecond
)

// minMACKey is the shortest Config.MACKey accepted: an HMAC-SHA256 key
// shorter than the hash gives less than its strength.
const minMACKey = 32

// Config configures a Cache. The zero value is valid and caches nothing.
type Config struct {
	// URL is the Redis to use, as TOKEND_REDIS_URL gives it; empty turns
	// the cache off. Three forms, told apart by their query parameters:
	//
	//	redis://[user:pass@]host:port/db       one server (redis.ParseURL)
	//	redis://host:port?addr=host2:port2&…   a Redis Cluster's seed nodes (redis.ParseClusterURL)
	//	redis://host:port?master_name=name&…   a master Sentinel watches; host and
	//	                                       addr name the sentinels (redis.ParseFailoverURL)
	//
	// rediss:// asks for TLS. Other query parameters are go-redis's own
	// (dial_timeout, pool_size, …).
	URL string
	// Prefix starts every key, so that deployments can share a Redis.
	// Empty means DefaultPrefix.
	Prefix string
	// TokenTTL is how long a token entry, a known rejection or a token
	// tombstone lives. Entries are of terminal tokens only, so it bounds
	// memory, not staleness. Zero means DefaultTokenTTL.
	TokenTTL time.Duration
	// KeyTTL is how long an API key tombstone lives (written for earlier
	// versions during a rolling deploy; no resolution is cached in Redis).
	// Zero means DefaultKeyTTL.
	KeyTTL time.Duration
	// Timeout bounds each dial, read and write to Redis and each wait for a
	// pooled connection, unless the URL sets its own. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// BreakerThreshold is how many consecutive Redis failures open the
	// breaker. Zero means DefaultBreakerThreshold.
	BreakerThreshold int
	// BreakerCooldown is how long an open breaker keeps calls away from
	// Redis before it lets one through to probe it. Zero means
	// DefaultBreakerCooldown.
	BreakerCooldown time.Duration
	// LocalTTL is how long a token read in a terminal state (consumed,
	// failed, revoked, expired) is kept in this process and served without
	// asking Redis, whose GET costs about as much as Postgres's primary key
	// lookup does. Such a record never changes, so other instances need not
	// invalidate the copy; it is dropped a minute before the token's
	// RetainUntil at the latest, so that it never outlives the purge.
	// LocalTTL bounds the copy's life anyway, should the row go by a path
	// that invalidates nothing (an operator's SQL, a restore). Zero means
	// DefaultLocalTTL; negative keeps nothing in process. The layer is part
	// of the Redis cache: without a URL there is none, and while Redis is
	// failing (StatusDegraded) nothing new is kept.
	LocalTTL time.Duration
	// LocalMax bounds how many tokens LocalTTL keeps in process. A new
	// entry in a full layer evicts arbitrary ones. Zero means
	// DefaultLocalMax.
	LocalMax int
	// LocalMaxBytes bounds the memory LocalTTL's copies take, as estimated
	// from the lengths of their fields plus a fixed overhead per entry.
	// Copies hold only what a token read shows: never a stored result
	// body. Zero means DefaultLocalMaxBytes (8 MiB).
	LocalMaxBytes int64
	// MACKey authenticates every entry written to Redis (see MACKey, which
	// derives it from the server key): an entry without a valid MAC is a
	// miss, counted as "forged". Every instance sharing a Redis must use
	// the same key, at least 32 bytes. Empty means a random key of this
	// Cache's own, whose entries no other process can read: for tests and
	// one-off tools only.
	MACKey []byte
	// PreviousMACKeys are accepted on read besides MACKey, never written
	// with: tokend derives them from TOKEND_PREVIOUS_SECRET_KEYS, so that
	// during a rolling rotation of the server key instances on the old and
	// the new key read each other's entries. Retiring a server key retires
	// its MAC key. Each must be at least 32 bytes.
	PreviousMACKeys [][]byte
	// ProbeInterval is how long the result of a Probe of Redis (for
	// /readyz) is reused. Zero means DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each Probe. Zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Logger receives a warning for each forged entry found. Nil means
	// slog.Default().
	Logger *slog.Logger
	// RequestID, if set, returns the id of the request a context belongs
	// to, for the warnings Logger receives.
	RequestID func(context.Context) string
	// Hook, if set, is added to the Redis client: tokend serve's tracing
	// (internal/infra/tracing) makes a span of each command with it.
	Hook redis.Hook
	// Observer, if set, is told the result of every Redis operation and each
	// change of the breaker's state, for metrics.
	Observer Observer
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.TokenTTL < 0:
		return fmt.Errorf("cache: TokenTTL %v is negative", c.TokenTTL)
	case c.KeyTTL < 0:
		return fmt.Errorf("cache: KeyTTL %v is negative", c.KeyTTL)
	case c.Timeout < 0:
		return fmt.Errorf("cache: Timeout %v is negative", c.Timeout)
	case c.BreakerThreshold < 0:
		return fmt.Errorf("cache: BreakerThreshold %d is negative", c.BreakerThreshold)
	case c.BreakerCooldown < 0:
		return fmt.Errorf("cache: BreakerCooldown %v is negative", c.BreakerCooldown)
	case c.LocalMax < 0:
		return fmt.Errorf("cache: LocalMax %d is negative", c.LocalMax)
	case c.LocalMaxBytes < 0:
		return fmt.Errorf("cache: LocalMaxBytes %d is negative", c.LocalMaxBytes)
	case len(c.MACKey) > 0 && len(c.MACKey) < minMACKey:
		return fmt.Errorf("cache: MACKey has %d bytes, want at least %d", len(c.MACKey), minMACKey)
	case slices.ContainsFunc(c.PreviousMACKeys, func(k []byte) bool { return len(k) < minMACKey }):
		return fmt.Errorf("cache: a PreviousMACKeys entry has fewer than %d bytes", minMACKey)
	case c.ProbeInterval < 0:
		return fmt.Errorf("cache: ProbeInterval %v is negative", c.ProbeInterval)
	case c.ProbeTimeout < 0:
		return fmt.Errorf("cache: ProbeTimeout %v is negative", c.ProbeTimeout)
	}
	if c.URL != "" {
		if _, err := parseURL(c.URL, DefaultTimeout); err != nil {
			return err
		}
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.KeyTTL == 0 {
		c.KeyTTL = DefaultKeyTTL
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = DefaultBreakerThreshold
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
	}
	if c.LocalTTL == 0 {
		c.LocalTTL = DefaultLocalTTL
	}
	if c.LocalMax == 0 {
		c.LocalMax = DefaultLocalMax
	}
	if c.LocalMaxBytes == 0 {
		c.LocalMaxBytes = DefaultLocalMaxBytes
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
