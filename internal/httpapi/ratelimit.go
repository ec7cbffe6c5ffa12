package httpapi

import (
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tokend/tokend/internal/cache"
)

// RateLimit bounds how fast one API key may call the API. The zero value
// means no limit. With a cache on Redis (Config.Cache), every instance
// sharing that Redis draws from one bucket per key; while Redis cannot be
// asked, each instance limits on its own.
type RateLimit struct {
	// PerSecond is the sustained rate allowed per key.
	PerSecond float64
	// Burst is how many requests a key may make at once after idling.
	// Default: twice PerSecond, at least 1.
	Burst int
}

func (r RateLimit) enabled() bool { return r.PerSecond > 0 }

var errRateLimited = &Problem{Status: http.StatusTooManyRequests, Code: "rate_limited", Title: "Too many requests",
	Detail: "this API key is over its request rate; retry after the number of seconds in Retry-After"}

// keyLimiter holds one token bucket per API key id. Buckets idle for longer
// than a refill are dropped, so the map stays as small as the active keys.
type keyLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newKeyLimiter(r RateLimit) *keyLimiter {
	burst := r.Burst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(2*r.PerSecond)))
	}
	return &keyLimiter{limit: rate.Limit(r.PerSecond), burst: burst, buckets: map[string]*bucket{}}
}

// allow takes one request from key's bucket. When the bucket is empty it
// returns how long until one is available.
func (l *keyLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > time.Minute {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > time.Minute {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// allow takes one request of key's rate: from the bucket in Redis that the
// whole fleet shares, or, when Redis cannot be asked, from this process's.
func (s *Server) allow(ctx context.Context, keyID string) (bool, time.Duration) {
	if s.cache.Status() != cache.StatusOff {
		ok, wait, err := s.cache.Allow(ctx, keyID, float64(s.limiter.limit), s.limiter.burst)
		if err == nil {
			return ok, wait
		}
	}
	return s.limiter.allow(keyID, time.Now())
}

// rateLimited is errRateLimited with the wait, in whole seconds rounded up.
func rateLimited(wait time.Duration) *Problem {
	p := *errRateLimited
	p.RetryAfter = max(1, int(math.Ceil(wait.Seconds())))
	return &p
}
