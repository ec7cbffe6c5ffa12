package cache

import (
	"context"
	"testing"
	"time"
)

// TestProbeFollowsRedisWithoutTraffic: with no lookups at all, Probe finds
// Redis gone and back within an interval, and its success closes the
// breaker its failures opened.
func TestProbeFollowsRedisWithoutTraffic(t *testing.T) {
	ctx := context.Background()
	c, mr, _ := openMini(t, Config{ProbeInterval: 20 * time.Millisecond, Timeout: 200 * time.Millisecond, BreakerThreshold: 1, BreakerCooldown: time.Hour})
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe with Redis up = %v", err)
	}
	mr.Close()
	waitProbe(t, c, false)
	if s := c.Status(); s != StatusDegraded {
		t.Errorf("Status after failed probes = %s, want degraded", s)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	waitProbe(t, c, true)
	if s := c.Status(); s != StatusOK {
		t.Errorf("Status after a probe found Redis back = %s, want ok (the breaker's cool-down is an hour)", s)
	}
}

func TestProbeOff(t *testing.T) {
	var c *Cache
	if err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func waitProbe(t *testing.T, c *Cache, up bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for (c.Probe(context.Background()) == nil) != up {
		if time.Now().After(deadline) {
			t.Fatalf("Probe did not see Redis up=%v within 5s", up)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
