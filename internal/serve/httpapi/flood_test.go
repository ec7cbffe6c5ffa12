package httpapi_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/serve/httpapi"
)

// TestReadyzFloodRunsTheChecksOncePerSecond: /readyz is unauthenticated;
// a flood of probes runs the checks (each a database or Redis round trip)
// at most once per second, and each probe still gets the answer.
func TestReadyzFloodRunsTheChecksOncePerSecond(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	count := func(context.Context) error { runs.Add(1); return nil }
	a := newAPI(t, func(c *httpapi.Config) { c.Checks = []httpapi.Check{{Name: "queue", Ping: count}} })
	start := time.Now()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if res := a.get("", "/readyz"); res.status != http.StatusOK {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n, most := runs.Load(), int64(time.Since(start)/time.Second)+1; n > most || bad.Load() != 0 {
		t.Fatalf("200 probes in %v ran the checks %d times (want at most %d); %d not 200", time.Since(start), n, most, bad.Load())
	}
}
