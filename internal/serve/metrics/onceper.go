package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReadEvery is how long one reading of a collector that asks the database
// serves every scrape: /metrics is unauthenticated, and a flood of scrapes
// must cost the database one reading per interval, not one per scrape.
const ReadEvery = time.Second

// Cached returns cs, each collecting at most once per ReadEvery: a scrape
// within it gets the metrics of the last collection, and scrapes that
// arrive while one collects wait for that one.
func Cached(cs ...prometheus.Collector) []prometheus.Collector { return cachedEvery(ReadEvery, cs...) }

func cachedEvery(every time.Duration, cs ...prometheus.Collector) []prometheus.Collector {
	out := make([]prometheus.Collector, len(cs))
	for i, c := range cs {
		out[i] = &cached{c: c, every: every}
	}
	return out
}

type cached struct {
	c     prometheus.Collector
	every time.Duration
	mu    sync.Mutex // held through a collection
	at    time.Time
	last  []prometheus.Metric
}

func (c *cached) Describe(ch chan<- *prometheus.Desc) { c.c.Describe(ch) }

func (c *cached) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if time.Since(c.at) >= c.every {
		got := make(chan prometheus.Metric)
		go func() {
			defer close(got)
			c.c.Collect(got)
		}()
		var fresh []prometheus.Metric // a new slice: earlier scrapes may still range over the last
		for m := range got {
			fresh = append(fresh, m)
		}
		c.last, c.at = fresh, time.Now()
	}
	last := c.last
	c.mu.Unlock()
	for _, m := range last {
		ch <- m
	}
}
