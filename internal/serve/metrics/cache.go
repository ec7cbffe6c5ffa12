package metrics

import "github.com/prometheus/client_golang/prometheus"

// The kinds, results and breaker states internal/infra/cache reports; see
// cache.Observer.
var (
	cacheKinds    = []string{"token", "secret", "apikey"}
	cacheResults  = []string{"hit", "miss", "garbage", "forged", "error", "skipped"}
	breakerStates = []string{"closed", "open", "half_open"}
)

// ObserveCache counts one cache operation. With ObserveBreaker it makes
// Metrics a cache.Observer.
func (m *Metrics) ObserveCache(kind, result string) {
	if m == nil {
		return
	}
	kind = oneOf(kind, cacheKinds)
	m.cacheOps.WithLabelValues(kind, oneOf(result, cacheResults)).Inc()
	if result == "forged" {
		m.cacheForged.WithLabelValues(kind).Inc()
	}
}

// newCacheForged counts Redis entries that failed authentication: someone
// who can write to Redis but lacks the server key tried to plant an answer.
func newCacheForged() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "cache", Name: "forged_total",
		Help: "Redis cache entries whose MAC did not check, by kind of entry (token, secret, apikey): " +
			"ignored, removed and logged. Any is a sign that someone writes to Redis.",
	}, []string{"kind"})
}

// ObserveBreaker records the state the cache's circuit breaker is now in.
func (m *Metrics) ObserveBreaker(state string) {
	if m == nil {
		return
	}
	for _, s := range breakerStates {
		v := 0.0
		if s == state {
			v = 1
		}
		m.breaker.WithLabelValues(s).Set(v)
	}
}
