package demo

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/keyrate"
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

func (r RateLimit) limiter() *keyrate.Limiter { return keyrate.New(r.PerSecond, r.Burst) }

func (r RateLimit) valid() bool {
	return r == RateLimit{} || r.PerSecond > 0 && r.Burst > 0
}

// limit answers 429 to a client address or a signed-in visitor over its
// rate. The address is the connection's: a client sets X-Forwarded-For to
// anything it likes, so that header is not believed.
func (a *App) limit(c *gin.Context) {
	now := time.Now()
	ok, wait := a.perIP.Allow(remoteIP(c.Request), now)
	if ok {
		if u := a.currentUser(c.Request); u != "" {
			ok, wait = a.perVisitor.Allow(u, now)
		}
	}
	if ok {
		return
	}
	c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
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
