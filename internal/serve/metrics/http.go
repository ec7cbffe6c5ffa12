package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// unmatched is the route of a request no route matched. Its path is never
// used: it is whatever the client sent, a secret included.
const unmatched = "unmatched"

var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// Middleware counts and times every request by method, route template (as
// gin matched it, e.g. /v1/tokens/:id) and status. Install it on the engine,
// ahead of the handlers, so that it sees every request, answered by a
// handler, a middleware or no route at all.
func (m *Metrics) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		returned := false
		// Deferred, so that a panic on its way to a recovering middleware
		// further out is counted too, as the 500 that one will answer.
		defer func() {
			status := c.Writer.Status()
			if !returned && !c.Writer.Written() {
				status = http.StatusInternalServerError
			}
			route := c.FullPath()
			if route == "" {
				route = unmatched
			}
			o := m.routeObservers(oneOf(c.Request.Method, methods), route, status)
			o.requests.Inc()
			o.duration.Observe(time.Since(start).Seconds())
		}()
		c.Next()
		returned = true
	}
}

// routeKey is the labels of one request's series.
type routeKey struct {
	method, route string
	status        int
}

// routeObs is the series of one routeKey, as WithLabelValues returns them.
type routeObs struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// routeSeries remembers each label set's series (a sync.Map of routeKey to
// routeObs): WithLabelValues would hash the labels and format the status on
// every request. The label sets are few (methods, route templates and
// statuses) and no series is ever deleted, so the map stays small and every
// series it holds is the one the vectors export.
type routeSeries struct{ m sync.Map }

func (m *Metrics) routeObservers(method, route string, status int) routeObs {
	k := routeKey{method, route, status}
	if o, ok := m.series.m.Load(k); ok {
		return o.(routeObs)
	}
	o := routeObs{
		requests: m.requests.WithLabelValues(method, route, strconv.Itoa(status)),
		duration: m.duration.WithLabelValues(method, route),
	}
	m.series.m.Store(k, o)
	return o
}
