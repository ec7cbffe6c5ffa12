package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
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
			method := oneOf(c.Request.Method, methods)
			m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
			m.duration.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
		}()
		c.Next()
		returned = true
	}
}
