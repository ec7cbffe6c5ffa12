package metrics

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "tokend"

// DefaultStatsTimeout is Config.StatsTimeout's default.
const DefaultStatsTimeout = 2 * time.Second

// Config configures Metrics. The zero value is valid.
type Config struct {
	// Pool, if set, is reported as tokend_db_pool_*, read from its Stat at
	// each scrape.
	Pool *pgxpool.Pool
	// Stats, if set, is called for the tokens someone owes an outcome for,
	// reported as tokend_tokens_unresolved*: at a scrape, unless the last
	// call was less than StatsEvery ago, whose figures serve it then. A
	// failed call leaves those gauges out and counts the failure.
	Stats func(context.Context) (Stats, error)
	// StatsTimeout bounds each call of Stats. Zero means DefaultStatsTimeout.
	StatsTimeout time.Duration
	// StatsEvery bounds how often Stats is called, however often /metrics
	// is scraped. Zero means ReadEvery (1 s); negative, at every scrape.
	StatsEvery time.Duration
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	if c.StatsTimeout < 0 {
		return fmt.Errorf("metrics: StatsTimeout %v is negative", c.StatsTimeout)
	}
	return nil
}

// Metrics holds tokend's collectors. Its methods are safe for concurrent
// use. The Observe methods do nothing on a nil *Metrics, so that code which
// records can run without metrics, in tests for instance.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	issues   *prometheus.CounterVec
	spends   *prometheus.CounterVec
	cacheOps *prometheus.CounterVec
	breaker  *prometheus.GaugeVec
	// secretInURL counts requests that carried a secret in their URL.
	secretInURL *prometheus.CounterVec
	// retiredKey counts refusals for a retired server key (retired.go).
	retiredKey *prometheus.CounterVec
	// cacheForged counts cache entries refused as forged or tampered.
	cacheForged *prometheus.CounterVec
	// series caches the HTTP series by label set (http.go).
	series routeSeries
}

// New returns Metrics configured by cfg, on a registry of their own that
// also holds the Go runtime's and the process's collectors.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by method, route template and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method and route template.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
		issues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "issues_total",
			Help: "Token issue requests, by outcome: created, replayed or rejected.",
		}, []string{"outcome"}),
		spends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "spends_total",
			Help: "Token spends, by outcome: executed, replayed, failed, in_progress or rejected.",
		}, []string{"outcome"}),
		cacheOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "cache", Name: "operations_total",
			Help: "Redis cache operations, by kind of entry and result. A lookup ends in hit, miss, " +
				"garbage, forged (failed authentication), error or skipped (breaker open, or a lost invalidation); a failed write counts as error.",
		}, []string{"kind", "result"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "cache", Name: "breaker_state",
			Help: "1 for the state the Redis circuit breaker is in (closed, open, half_open), 0 for the others.",
		}, []string{"state"}),
		secretInURL: newSecretInURL(),
		cacheForged: newCacheForged(),
	}
	// Every series of a fixed set exists from the start, at zero, so that
	// rate() and alerts see the first event.
	for _, o := range issueOutcomes {
		m.issues.WithLabelValues(o)
	}
	for _, o := range spendOutcomes {
		m.spends.WithLabelValues(o)
	}
	for _, k := range cacheKinds {
		for _, r := range cacheResults {
			m.cacheOps.WithLabelValues(k, r)
		}
	}
	for _, s := range breakerStates {
		m.breaker.WithLabelValues(s)
	}
	for _, p := range urlParts {
		m.secretInURL.WithLabelValues(p)
	}
	for _, k := range cacheKinds {
		m.cacheForged.WithLabelValues(k)
	}

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.duration, m.issues, m.spends, m.cacheOps, m.breaker, m.cacheForged,
		m.secretInURL,
	)
	m.retiredKey = newRetiredKeyRefusals()
	m.reg.MustRegister(m.retiredKey)
	if cfg.Pool != nil {
		m.reg.MustRegister(newPoolCollector(cfg.Pool))
	}
	if cfg.Stats != nil {
		timeout := cfg.StatsTimeout
		if timeout == 0 {
			timeout = DefaultStatsTimeout
		}
		m.reg.MustRegister(cachedEvery(cmp.Or(cfg.StatsEvery, ReadEvery), newStatsCollector(cfg.Stats, timeout))...)
	}
	return m, nil
}

// Register adds collectors kept elsewhere (the webhook dispatcher's) to the
// metrics served.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: register: %w", err)
		}
	}
	return nil
}

// Handler serves the metrics in Prometheus's text format, for /metrics. A
// collector that fails leaves its metrics out rather than failing the
// scrape.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// other stands in for a label value outside its fixed set.
const other = "other"

// oneOf returns v if it is one of allowed, and other if not.
func oneOf(v string, allowed []string) string {
	if slices.Contains(allowed, v) {
		return v
	}
	return other
}
