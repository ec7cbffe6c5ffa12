package feedwait

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokend/tokend/event"
)

// Collectors are the event feed's metrics: the waiters parked here, the age
// of the oldest transaction holding every feed back, and each tenant's feed
// lag as the server sees it (how long its oldest event held back by an open
// transaction has waited).
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
				"Per tenant that reads its feed: how long its oldest committed event has waited for a position because an older transaction is open.",
				[]string{"tenant"}, nil),
		},
	}
}

type stallCollector struct {
	h            *Hub
	oldest, held *prometheus.Desc
}

func (c *stallCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.oldest; ch <- c.held }

func (c *stallCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := event.Stalls(ctx, c.h.cfg.Pool)
	if err != nil {
		return // left out of this scrape rather than reported wrong
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestTransaction.Seconds())
	for tenant, d := range s.Held {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, d.Seconds(), tenant)
	}
}
