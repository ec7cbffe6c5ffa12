package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/event"
)

const (
	postgresCheck = "postgres"
	cacheCheck    = "redis"
)

// checkTimeout bounds each /readyz check, so a hung dependency reads as down
// before the load balancer's probe gives up.
const checkTimeout = 2 * time.Second

// healthz says the process is up and serving; it checks nothing else, so a
// database outage does not get healthy processes restarted.
func (s *Server) healthz(c *gin.Context) {
	WriteJSON(c, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness is /readyz's answer. Status is "ready", "degraded" (an optional
// dependency is down) or "unavailable"; each check is "ok", "degraded" or
// "down". Errors go to the log, not to this unauthenticated answer.
type readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	// Stalls names what slows the service without making it unready: a
	// transaction open past Config.FeedStallAfter holds every event feed.
	Stalls map[string]string `json:"stalls,omitempty"`
}

// readyEvery is how long one run of the checks answers /readyz: it is
// unauthenticated, and a flood of probes must cost the database one run per
// interval, not one per probe.
const readyEvery = time.Second

// readyCache is the last run of the checks; mu is held through a run, so
// probes that arrive meanwhile wait for it.
type readyCache struct {
	mu sync.Mutex
	at time.Time
	r  readiness
}

func (s *Server) readyz(c *gin.Context) {
	s.ready.mu.Lock()
	if time.Since(s.ready.at) >= readyEvery {
		s.ready.r, s.ready.at = s.checkReadiness(c), time.Now()
	}
	r := s.ready.r
	s.ready.mu.Unlock()
	status := http.StatusOK
	if r.Status == "unavailable" {
		status = http.StatusServiceUnavailable
		c.Header("Retry-After", "1")
	}
	WriteJSON(c, status, r)
}

// checkReadiness runs every check; the answer is never changed after.
func (s *Server) checkReadiness(c *gin.Context) readiness {
	r := readiness{Status: "ready", Checks: map[string]string{}}
	for _, ch := range s.checks {
		ctx, cancel := context.WithTimeout(c.Request.Context(), checkTimeout)
		err := ch.Ping(ctx)
		cancel()
		switch {
		case err == nil:
			r.Checks[ch.Name] = "ok"
			continue
		case ch.Optional:
			r.Checks[ch.Name] = "degraded"
			if r.Status == "ready" {
				r.Status = "degraded"
			}
		default:
			r.Checks[ch.Name] = "down"
			r.Status = "unavailable"
		}
		s.log.LogAttrs(c.Request.Context(), slog.LevelWarn, "readiness check failed",
			slog.String("request_id", c.GetString(requestIDKey)), slog.String("check", ch.Name), slog.String("error", err.Error()))
	}
	if r.Checks[postgresCheck] == "ok" {
		ctx, cancel := context.WithTimeout(c.Request.Context(), checkTimeout)
		st, err := event.Stalls(ctx, s.pool)
		cancel()
		if err == nil && st.OldestTransaction > s.feedStallAfter {
			r.Stalls = map[string]string{"event_feed": fmt.Sprintf(
				"a transaction has been open on the database server for %s (over %s): every event feed waits for it to end",
				st.OldestTransaction.Round(time.Second), s.feedStallAfter)}
		}
	}
	return r
}
