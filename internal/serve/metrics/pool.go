package metrics

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolStats are the figures of pgxpool.Stat reported, each under
// tokend_db_pool_<name>.
var poolStats = []struct {
	name, help string
	kind       prometheus.ValueType
	value      func(*pgxpool.Stat) float64
}{
	{"acquired_conns", "Connections in use.", prometheus.GaugeValue,
		func(s *pgxpool.Stat) float64 { return float64(s.AcquiredConns()) }},
	{"idle_conns", "Connections idle in the pool.", prometheus.GaugeValue,
		func(s *pgxpool.Stat) float64 { return float64(s.IdleConns()) }},
	{"constructing_conns", "Connections being opened.", prometheus.GaugeValue,
		func(s *pgxpool.Stat) float64 { return float64(s.ConstructingConns()) }},
	{"total_conns", "Connections open or being opened.", prometheus.GaugeValue,
		func(s *pgxpool.Stat) float64 { return float64(s.TotalConns()) }},
	{"max_conns", "Most connections the pool opens.", prometheus.GaugeValue,
		func(s *pgxpool.Stat) float64 { return float64(s.MaxConns()) }},
	{"acquires_total", "Connections acquired.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.AcquireCount()) }},
	{"acquire_seconds_total", "Time spent acquiring connections.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return s.AcquireDuration().Seconds() }},
	{"empty_acquires_total", "Acquires that waited because no connection was idle: a sign the pool is too small.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.EmptyAcquireCount()) }},
	{"empty_acquire_wait_seconds_total", "Time acquires spent waiting for a connection to come free.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return s.EmptyAcquireWaitTime().Seconds() }},
	{"canceled_acquires_total", "Acquires given up because their context ended.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.CanceledAcquireCount()) }},
	{"new_conns_total", "Connections opened.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.NewConnsCount()) }},
	{"max_lifetime_destroys_total", "Connections closed for reaching their maximum lifetime.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.MaxLifetimeDestroyCount()) }},
	{"max_idle_destroys_total", "Connections closed for idling too long.", prometheus.CounterValue,
		func(s *pgxpool.Stat) float64 { return float64(s.MaxIdleDestroyCount()) }},
}

// poolCollector reads a pool's Stat at each scrape: the pool keeps the
// figures, so copying them into gauges in between would only lag.
type poolCollector struct {
	pool  *pgxpool.Pool
	descs []*prometheus.Desc // in the order of poolStats
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	c := &poolCollector{pool: pool}
	for _, s := range poolStats {
		c.descs = append(c.descs, prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "db_pool", s.name), s.help, nil, nil))
	}
	return c
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	for i, s := range poolStats {
		ch <- prometheus.MustNewConstMetric(c.descs[i], s.kind, s.value(st))
	}
}
