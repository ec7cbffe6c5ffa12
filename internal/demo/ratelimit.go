package demo

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/time/rate"
)

// RateLimit bounds how fast one visitor, or one client address, may use the
// demo: every page but the static files counts, and each rendering of the
// top-up form issues a token.
type RateLimit struct {
	PerSecond float64 // sustained rate
	Burst     int     // requests at once after idling
}

// Defaults of Config.VisitorLimit and Config.IPLimit: enough for a person
// clicking around, far too little to mint tokens in bulk.
var (
	DefaultVisitorLimit = RateLimit{PerSecond: 1, Burst: 20}
	DefaultIPLimit      = RateLimit{PerSecond: 5, Burst: 60}
)

// limiter holds one token bucket per key. Buckets idle for a minute are
// dropped, so it holds only the active visitors.
type limiter struct {
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

func (r RateLimit) valid() bool {
	return r == RateLimit{} || r.PerSecond > 0 && r.Burst > 0
}

func newLimiter(r RateLimit) *limiter {
	return &limiter{limit: rate.Limit(r.PerSecond), burst: r.Burst, buckets: map[string]*bucket{}}
}

// allow takes one request from key's bucket; when it is empty, it says how
// long until one is available.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
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
	if d := r.DelayFrom(now); d > 0 || !r.OK() {
		r.CancelAt(now)
		return false, max(d, time.Second)
	}
	return true, 0
}

// limit answers 429 to a client address or a signed-in visitor over its
// rate. The address is the connection's: a client sets X-Forwarded-For to
// anything it likes, so that header is not believed.
func (a *App) limit(c *gin.Context) {
	now := time.Now()
	ok, wait := a.perIP.allow(remoteIP(c.Request), now)
	if ok {
		if u := a.currentUser(c.Request); u != "" {
			ok, wait = a.perVisitor.allow(u, now)
		}
	}
	if ok {
		return
	}
	c.Header("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	a.pages.render(c.Writer, http.StatusTooManyRequests, "error.html", a.currentUser(c.Request), errorData{
		Title:   "Too many requests",
		Message: "You are going too fast for this demo. Wait a few seconds, then try again.",
	})
	c.Abort()
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
