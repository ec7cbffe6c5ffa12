package metrics

// The kinds, results and breaker states internal/cache reports; see
// cache.Observer.
var (
	cacheKinds    = []string{"token", "secret", "apikey"}
	cacheResults  = []string{"hit", "miss", "garbage", "error", "skipped"}
	breakerStates = []string{"closed", "open", "half_open"}
)

// ObserveCache counts one cache operation. With ObserveBreaker it makes
// Metrics a cache.Observer.
func (m *Metrics) ObserveCache(kind, result string) {
	if m == nil {
		return
	}
	m.cacheOps.WithLabelValues(oneOf(kind, cacheKinds), oneOf(result, cacheResults)).Inc()
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
