package httpapi

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/keyrate"
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

// newKeyLimiter is the per-process limiter of r, one bucket per API key id.
func newKeyLimiter(r RateLimit) *keyrate.Limiter {
	burst := r.Burst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(2*r.PerSecond)))
	}
	return keyrate.New(r.PerSecond, burst)
}

// allow takes one request of key's rate: from the bucket in Redis that the
// whole fleet shares, or, when Redis cannot be asked, from this process's.
func (s *Server) allow(ctx context.Context, keyID string) (bool, time.Duration) {
	if s.cache.Status() != cache.StatusOff {
		ok, wait, err := s.cache.Allow(ctx, keyID, s.limiter.PerSecond(), s.limiter.Burst())
		if err == nil {
			return ok, wait
		}
	}
	return s.limiter.Allow(keyID, time.Now())
}

// rateLimited is errRateLimited with the wait, in whole seconds rounded up.
func rateLimited(wait time.Duration) *Problem {
	p := *errRateLimited
	p.RetryAfter = max(1, int(math.Ceil(wait.Seconds())))
	return &p
}

// Allow takes one request of the rate of the API key keyID, as the API's
// own requests do, and says whether it may go on or how long to wait; with
// no rate limit configured it always may. Other ways in that act for a key
// (the operator console) call it, so they share the key's one limit.
func (s *Server) Allow(ctx context.Context, keyID string) (bool, time.Duration) {
	if s.limiter == nil {
		return true, 0
	}
	return s.allow(ctx, keyID)
}
