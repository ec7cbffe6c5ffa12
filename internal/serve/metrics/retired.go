package metrics

import "github.com/prometheus/client_golang/prometheus"

// RetiredKeyAction is what a client tried with a token whose secret was
// derived under a retired server key.
type RetiredKeyAction string

// The actions refused for a retired key.
const (
	// RetiredKeySpend: a spend presented a secret derived under a retired
	// key. After a leak of the database and the server key, this is what an
	// attacker re-deriving secrets looks like.
	RetiredKeySpend RetiredKeyAction = "spend"
	// RetiredKeyIssue: a re-issue of an intent whose token was derived under
	// a retired key, which can no longer be returned.
	RetiredKeyIssue RetiredKeyAction = "issue"
)

var retiredKeyActions = []string{string(RetiredKeySpend), string(RetiredKeyIssue)}

func newRetiredKeyRefusals() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "retired_key_refusals_total",
		Help: "Requests refused because the token's secret was derived under a retired server key, by action: spend or issue.",
	}, []string{"action"})
	for _, a := range retiredKeyActions {
		c.WithLabelValues(a)
	}
	return c
}

// ObserveRetiredKey counts one request refused for a retired server key.
func (m *Metrics) ObserveRetiredKey(a RetiredKeyAction) {
	if m == nil {
		return
	}
	m.retiredKey.WithLabelValues(oneOf(string(a), retiredKeyActions)).Inc()
}
