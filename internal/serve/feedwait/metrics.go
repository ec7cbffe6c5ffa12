package feedwait

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokend/tokend/event"
)

// Collectors are the event feed's metrics: the waiters parked here, the age
// of the oldest transaction holding every feed back, and the worst feed lag
// of any tenant as the server sees it (how long the oldest event held back
// by an open transaction has waited) with how many tenants lag. No label
// names a tenant: /metrics is unauthenticated. The database is asked at
// most once per stallsEvery, however often /metrics is scraped.
func (h *Hub) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tokend_event_feed_waiters",
			Help: "Long polls of the event feed parked on this instance.",
		}, func() float64 { n, _ := h.Waiters(); return float64(n) }),
		&stallCollector{h: h,
			oldest: prometheus.NewDesc("tokend_event_feed_oldest_transaction_seconds",
				"How long the oldest transaction running on the database server (any database) or prepared has been open; "+
					"every event feed waits for it. 0 when none.", nil, nil),
			held: prometheus.NewDesc("tokend_event_feed_lag_seconds",
				"The worst, over the tenants that read their feed: how long the oldest committed event has waited for a position because an older transaction is open.",
				nil, nil),
			lagging: prometheus.NewDesc("tokend_event_feed_lagging_tenants",
				"How many tenants that read their feed have a committed event waiting for a position behind an open transaction.",
				nil, nil),
		},
	}
}

// stallsEvery is how long one reading of the stalls serves every scrape.
const stallsEvery = time.Second

type stallCollector struct {
	h                     *Hub
	oldest, held, lagging *prometheus.Desc

	mu   sync.Mutex // held through the reading: one query at a time
	at   time.Time
	last event.Stall
	ok   bool
}

func (c *stallCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.oldest
	ch <- c.held
	ch <- c.lagging
}

// stalls answers the last reading, reading again when it is older than
// stallsEvery; scrapes meanwhile wait for that one reading.
func (c *stallCollector) stalls() (event.Stall, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < stallsEvery {
		return c.last, c.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := event.Stalls(ctx, c.h.cfg.Pool)
	c.at, c.last, c.ok = time.Now(), s, err == nil
	return s, err == nil
}

func (c *stallCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.stalls()
	if !ok {
		return // left out of this scrape rather than reported wrong
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestTransaction.Seconds())
	var worst time.Duration
	for _, d := range s.Held {
		worst = max(worst, d)
	}
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, worst.Seconds())
	ch <- prometheus.MustNewConstMetric(c.lagging, prometheus.GaugeValue, float64(len(s.Held)))
}
