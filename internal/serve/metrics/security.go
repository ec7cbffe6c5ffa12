package metrics

import "github.com/prometheus/client_golang/prometheus"

// urlParts are where in a URL ObserveSecretInURL finds a secret.
var urlParts = []string{"path", "query"}

func newSecretInURL() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "secret_in_url_total",
		Help: "Requests whose URL held a token secret (tks_) or an API key (tkd_), by the part of the URL " +
			"(path or query). The value is never recorded; such a secret should be treated as leaked.",
	}, []string{"part"})
}

// ObserveSecretInURL counts a request whose URL held a secret in part, path
// or query.
func (m *Metrics) ObserveSecretInURL(part string) {
	if m == nil {
		return
	}
	m.secretInURL.WithLabelValues(oneOf(part, urlParts)).Inc()
}
