package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is what Config.Stats reports: the tokens someone owes an outcome
// for, which nothing expires or purges, so they are what to alert on (a
// lease holder that crashed, a reconcile that is owed). Its fields are
// admin.Stats's, so that one converts to the other.
type Stats struct {
	Pending int64 // tokens whose lease holder has yet to report
	Unknown int64 // tokens that wait for an operator to reconcile them
	// The age of the oldest token in each state, measured from its
	// creation by the database clock; zero when there is none.
	OldestPendingAge time.Duration
	OldestUnknownAge time.Duration
}

// statsCollector calls the Stats function at each scrape. A failed call
// leaves the gauges out of that scrape, rather than reporting stale or zero
// figures, and counts the failure.
type statsCollector struct {
	stats   func(context.Context) (Stats, error)
	timeout time.Duration
	count   *prometheus.Desc
	oldest  *prometheus.Desc
	errors  prometheus.Counter
}

func newStatsCollector(stats func(context.Context) (Stats, error), timeout time.Duration) *statsCollector {
	return &statsCollector{
		stats:   stats,
		timeout: timeout,
		count: prometheus.NewDesc(prometheus.BuildFQName(namespace, "tokens", "unresolved"),
			"Tokens pending or unknown, by state.", []string{"state"}, nil),
		oldest: prometheus.NewDesc(prometheus.BuildFQName(namespace, "tokens", "unresolved_oldest_age_seconds"),
			"Age of the oldest pending or unknown token, by state; 0 when there is none.", []string{"state"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "tokens", Name: "unresolved_errors_total",
			Help: "Scrapes that could not read the unresolved tokens' figures.",
		}),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.oldest
	c.errors.Describe(ch)
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape has no context of its own to pass on; the timeout keeps a
	// slow database from holding it until Prometheus gives up.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		c.errors.Inc()
	} else {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(s.Pending), "pending")
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(s.Unknown), "unknown")
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestPendingAge.Seconds(), "pending")
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestUnknownAge.Seconds(), "unknown")
	}
	c.errors.Collect(ch)
}
