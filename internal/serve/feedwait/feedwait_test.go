package feedwait_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestMetricsShowAStall: while a transaction that wrote an event stays
// open, the age of the oldest transaction and the lag of the tenant whose
// later event it holds back are reported, and they grow.
func TestMetricsShowAStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	hub, err := feedwait.New(feedwait.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(hub.Collectors()...)
	insert := `INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		VALUES ('t', $1, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1)`
	// The tenant reads its feed: it has a head.
	if _, err := pool.Exec(ctx, insert, "tok_read"); err != nil {
		t.Fatal(err)
	}
	for n := int64(0); n == 0; time.Sleep(5 * time.Millisecond) {
		if n, err = event.Position(ctx, pool, "t"); err != nil {
			t.Fatal(err)
		}
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, insert, "tok_open"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, "tok_held"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	oldest, lag := gather(t, reg)
	if oldest < 1.5 || lag < 1.4 {
		t.Fatalf("with a transaction open 1.5 s: oldest transaction %.2f s, tenant t's lag %.2f s; want both at least that", oldest, lag)
	}
}

// gather answers the oldest transaction's age and the worst tenant's lag
// (tenant t is the only one).
func gather(t *testing.T, reg *prometheus.Registry) (oldest, lag float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	lag = -1
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "tokend_event_feed_oldest_transaction_seconds":
				oldest = m.GetGauge().GetValue()
			case "tokend_event_feed_lag_seconds":
				lag = m.GetGauge().GetValue()
			}
		}
	}
	return oldest, lag
}
