package dispatch_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// hostileTenants is how many tenants hang in the R2 pattern:
// TOKEND_BENCH_WEBHOOK_HOSTILE, default 8 (twice what 64 workers ÷ 16 in
// flight per tenant used to let through).
func hostileTenants() int {
	if n, err := strconv.Atoi(os.Getenv("TOKEND_BENCH_WEBHOOK_HOSTILE")); err == nil && n > 0 {
		return n
	}
	return 8
}

// BenchmarkWebhookHostile: n dispatchers (1 and 3) deliver healthy tenant
// b's steady 10 events a second, first alone, then beside hostile tenants
// in each of the four patterns of issue 48: R1 a tenant disabling and
// enabling its hanging endpoints every 200 ms; R2 many tenants whose
// endpoints hang; R3 a tenant with a backlog of 20,000 deliveries failing
// at once, its endpoints re-enabled every 2 s; R4 a tenant answering 429
// with Retry-After: 0. It reports b's lag p99 in both phases and their
// ratio (issue 48 wants p99 ≤ max(2 s, 3× alone)), and in R4 the attempts
// per hostile delivery. Run with -benchtime 1x.
func BenchmarkWebhookHostile(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, pattern := range []string{"R1-flip", "R2-hanging", "R3-backlog", "R4-retry-after-0"} {
			b.Run(fmt.Sprintf("%s/instances=%d", pattern, n), func(b *testing.B) {
				for range b.N {
					hostileRun(b, pattern, n)
				}
			})
		}
	}
}

func hostileRun(b *testing.B, pattern string, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.NewPool(b)
	keys := keyring(b)
	l := &lags{seen: map[string]bool{}, by: map[string][]time.Duration{}}
	recv := l.receiver(b)
	stop := make(chan struct{})
	var hostileHits atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hostileHits.Add(1)
		switch pattern {
		case "R3-backlog":
			w.WriteHeader(http.StatusInternalServerError)
			return
		case "R4-retry-after-0":
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	b.Cleanup(hang.Close)
	b.Cleanup(func() { close(stop) })
	if _, _, err := dispatch.Create(ctx, pool, keys, local, "b", dispatch.NewEndpoint{URL: recv.URL + "/b"}); err != nil {
		b.Fatal(err)
	}
	hostile := []string{"a"}
	if pattern == "R2-hanging" {
		hostile = nil
		for i := range hostileTenants() {
			hostile = append(hostile, fmt.Sprintf("a%02d", i))
		}
	}
	var eps []dispatch.Endpoint
	for _, t := range hostile {
		for i := range 10 {
			ep, _, err := dispatch.Create(ctx, pool, keys, local, t, dispatch.NewEndpoint{URL: fmt.Sprintf("%s/%s/%d", hang.URL, t, i)})
			if err != nil {
				b.Fatal(err)
			}
			eps = append(eps, ep)
		}
	}
	instances(b, pool, n)
	d := benchDuration()
	steady(ctx, b, pool, 10, d, "b")
	time.Sleep(3 * time.Second)
	alone := l.take("b")

	switch pattern {
	case "R3-backlog":
		if _, err := pool.Exec(ctx, `
			INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status)
			SELECT 'a', 'bl_' || i, 'pay', 'a', 'bench', 'spend', 'issued', 'consumed', 0, 200 FROM generate_series(1, 2000) i`); err != nil {
			b.Fatal(err)
		}
		fallthrough
	case "R1-flip":
		every := 200 * time.Millisecond
		if pattern == "R3-backlog" {
			every = 2 * time.Second
		}
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				for _, ep := range eps {
					_, _ = dispatch.SetEnabled(ctx, pool, "a", ep.ID, false)
					_, _ = dispatch.SetEnabled(ctx, pool, "a", ep.ID, true)
				}
			}
		}()
	}
	phase := time.Now()
	steady(ctx, b, pool, 10, d, append([]string{"b"}, hostile...)...)
	time.Sleep(3 * time.Second)
	with := l.take("b")
	pa, pw := quantile(alone, .99), quantile(with, .99)
	b.ReportMetric(float64(pa.Milliseconds()), "b-p99-alone-ms")
	b.ReportMetric(float64(pw.Milliseconds()), "b-p99-hostile-ms")
	b.ReportMetric(float64(pw)/float64(max(pa, time.Millisecond)), "ratio")
	b.ReportMetric(float64(len(with)), "b-delivered")
	var owed int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id <> 'b'`).Scan(&owed); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(hostileHits.Load())/float64(max(owed, 1)), "hostile-attempts/delivery")
	// Where b's lag went beside the hostile tenants: from the event's commit to its
	// delivery row (positioning and fan-out), and from that row to the
	// recorded 2xx answer (claim and send).
	var fan, send [2]float64
	if err := pool.QueryRow(ctx, `
		SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM d.created_at - e.at)),
		       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM a.at - d.created_at))
		FROM webhook_deliveries d
		JOIN token_events e ON e.tenant_id = d.tenant_id AND e.event_id = d.event_id
		JOIN webhook_attempts a ON a.tenant_id = d.tenant_id AND a.endpoint_id = d.endpoint_id AND a.pos = d.pos AND a.attempt = 1
		WHERE d.tenant_id = 'b' AND e.at >= $1`, phase).Scan(&fan, &send); err != nil {
		b.Logf("lag breakdown: %v", err)
	}
	b.Logf("%s, %d instances: b's commit→fanned-out p50 %.2fs p99 %.2fs; fanned-out→answered p50 %.2fs p99 %.2fs", pattern, n, fan[0], fan[1], send[0], send[1])
	b.Logf("%s, %d instances: b alone %d deliveries p50 %v p99 %v; beside hostile %d, p50 %v p99 %v max %v; hostile: %d attempts for %d deliveries",
		pattern, n, len(alone), quantile(alone, .5), pa, len(with), quantile(with, .5), pw, quantile(with, 1), hostileHits.Load(), owed)
}
