// Package keyrate limits how fast each of many keys (an API key, a visitor,
// a client address) may go, with one token bucket per key kept in process.
// Buckets idle for a minute are dropped, so a Limiter holds only the keys
// in use.
package keyrate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter holds one token bucket per key. It is safe for concurrent use.
type Limiter struct {
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

// New returns a Limiter allowing each key perSecond requests sustained, and
// burst at once after idling.
func New(perSecond float64, burst int) *Limiter {
	return &Limiter{limit: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}}
}

// PerSecond is the sustained rate each key is allowed.
func (l *Limiter) PerSecond() float64 { return float64(l.limit) }

// Burst is how many requests a key may make at once after idling.
func (l *Limiter) Burst() int { return l.burst }

// Allow takes one request from key's bucket at now. When the bucket is
// empty, it takes nothing and says how long until a request would pass.
func (l *Limiter) Allow(key string, now time.Time) (bool, time.Duration) {
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
	if !r.OK() {
		return false, time.Second // a burst below 1: nothing ever passes
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}
