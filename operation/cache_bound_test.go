package operation

import (
	"fmt"
	"strings"
	"testing"
)

// A Cache holds at most maxCachedBytes of policies however long their
// ignored fields are, and at most maxCached entries.
func TestCacheBounded(t *testing.T) {
	tests := []struct {
		name   string
		fields int // ignored fields per policy, each 1 KiB
		n      int // policies stored
	}{
		{"long policies", 64, 500},
		{"many small policies", 0, 3 * maxCached},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache()
			long := make([]string, tt.fields)
			for i := range long {
				long[i] = strings.Repeat("x", 1024)
			}
			for i := range tt.n {
				name := fmt.Sprintf("op%d", i)
				c.store(cacheKey{"t", name}, Policy{Name: name, IgnoredFields: long})
				if c.bytes > maxCachedBytes || len(c.m) > maxCached {
					t.Fatalf("after %d policies: %d bytes in %d entries, bounds %d and %d", i+1, c.bytes, len(c.m), maxCachedBytes, maxCached)
				}
			}
			var sum int
			for k, p := range c.m {
				sum += policySize(k, p)
			}
			if sum != c.bytes {
				t.Errorf("bytes = %d, entries add up to %d", c.bytes, sum)
			}
			c.Forget("t", fmt.Sprintf("op%d", tt.n-1))
			if c.bytes >= sum {
				t.Errorf("Forget left bytes at %d", c.bytes)
			}
		})
	}
}
