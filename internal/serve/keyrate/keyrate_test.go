package keyrate

import (
	"testing"
	"time"
)

// TestAllow: each key has a bucket of its own, refilled at the rate; an
// empty one says how long to wait, and idle buckets are dropped.
func TestAllow(t *testing.T) {
	t.Parallel()
	l := New(2, 3)
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if ok, _ := l.Allow("a", now); !ok {
			t.Fatalf("request %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := l.Allow("a", now)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("4th request: %v, wait %v; want refused, 500ms at 2/s", ok, wait)
	}
	if ok, _ := l.Allow("b", now); !ok {
		t.Fatal("another key shares a's bucket")
	}
	if ok, _ := l.Allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Fatal("a's bucket did not refill")
	}
	l.Allow("c", now.Add(2*time.Minute))
	if _, kept := l.buckets["a"]; kept {
		t.Fatal("a bucket idle for over a minute was kept")
	}
}
