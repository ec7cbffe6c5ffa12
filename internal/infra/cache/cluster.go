package cache

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis Cluster's slot map goes stale in a failover: a replica takes over
// the dead master's slots, while go-redis keeps dialling the dead master
// until a MOVED answer or its periodic reload, up to a minute later. So, on
// a cluster, a failed call asks for a reload (ReloadState: asynchronous,
// one at a time), and while the breaker is open a watcher reloads the map
// and pings every master each ProbeInterval, closing the breaker as soon as
// they all answer rather than when the cool-down ends.

// failure records a failed call: the breaker counts it, and a cluster
// reloads its slot map in the background.
func (c *Cache) failure() {
	c.breaker.failure()
	if c.cluster != nil {
		c.cluster.ReloadState(context.Background())
	}
}

// ping asks Redis whether it answers: every master, on a cluster, so that
// one unreachable master is not hidden by the others.
func (c *Cache) ping(ctx context.Context) error {
	if c.cluster == nil {
		return c.rdb.Ping(ctx).Err()
	}
	return c.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.Ping(ctx).Err()
	})
}

// watchCluster runs until stop is closed: each ProbeInterval while the
// breaker is not closed, it reloads the slot map and pings the masters.
func (c *Cache) watchCluster(stop <-chan struct{}) {
	t := time.NewTicker(c.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if c.breaker.current() == stateClosed {
			continue
		}
		c.cluster.ReloadState(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ProbeTimeout)
		if c.ping(ctx) == nil {
			c.breaker.success()
		}
		cancel()
	}
}
