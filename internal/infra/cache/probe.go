package cache

import (
	"context"
	"sync"
	"time"
)

// prober keeps the last Probe's answer for Config.ProbeInterval.
type prober struct {
	mu  sync.Mutex
	at  time.Time // when err was found; zero before the first probe
	err error
}

// Probe asks Redis whether it answers, for /readyz: nil when it does (on a
// cluster, every master does), or when no Redis is configured. The answer
// is reused for Config.ProbeInterval, so that however often a load balancer
// asks, Redis gets at most one PING per interval; each is bounded by
// Config.ProbeTimeout (and by Config.Timeout, which bounds every read).
//
// Unlike Status, which follows the breaker and so changes only with
// traffic, Probe tells the truth on an idle instance too. Its answer also
// feeds the breaker: a PING that is answered closes an open breaker, so
// that an idle instance uses Redis again within an interval of its
// return, and one that fails counts as a failure.
func (c *Cache) Probe(ctx context.Context) error {
	if c.off() {
		return nil
	}
	p := &c.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() {
		if age := time.Since(p.at); age >= 0 && age < c.cfg.ProbeInterval {
			return p.err
		}
	}
	pctx, cancel := context.WithTimeout(detach(ctx), c.cfg.ProbeTimeout)
	defer cancel()
	p.err = c.ping(pctx)
	p.at = time.Now()
	if p.err != nil {
		c.failure()
	} else {
		c.breaker.success()
	}
	return p.err
}
