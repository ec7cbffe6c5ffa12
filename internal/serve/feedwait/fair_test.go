package feedwait_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokend/tokend/event"

	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestAFullHubIsShared: however many tenants fill the hub with long polls,
// a tenant with none still parks one, ending a wait of the tenant with the
// most (its Done closes; it counts no more); the tenant with the most is
// refused.
func TestAFullHubIsShared(t *testing.T) {
	t.Parallel()
	hub, err := feedwait.New(feedwait.Config{Pool: pgtest.NewPool(t), MaxWaiters: 64, MaxWaitersPerTenant: 64})
	if err != nil {
		t.Fatal(err)
	}
	var hostile []*feedwait.Waiter
	for i := range 64 {
		w, err := hub.Join(fmt.Sprintf("hostile-%d", i%4))
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		hostile = append(hostile, w)
	}
	defer func() {
		for _, w := range hostile {
			w.Leave()
		}
	}()
	if _, err := hub.Join("hostile-0"); !errors.Is(err, feedwait.ErrTooManyWaiters) {
		t.Fatalf("a tenant with the most joins a full hub: %v, want ErrTooManyWaiters", err)
	}
	for i := range 8 {
		w, err := hub.Join(fmt.Sprintf("healthy-%d", i))
		if err != nil {
			t.Fatalf("healthy tenant %d refused from a full hub: %v", i, err)
		}
		defer w.Leave()
	}
	ended := 0
	for _, w := range hostile {
		select {
		case <-w.Done():
			ended++
		default:
		}
	}
	total, per := hub.Waiters()
	if ended != 8 || total != 64 || per["healthy-3"] != 1 {
		t.Fatalf("%d waits ended, %d parked (%v): want 8 and 64", ended, total, per)
	}
}

// TestCloseEndsEveryWait: Close ends every wait at once and later joins are
// ErrClosed, so a shutdown waits for no long poll.
func TestCloseEndsEveryWait(t *testing.T) {
	t.Parallel()
	hub, err := feedwait.New(feedwait.Config{Pool: pgtest.NewPool(t)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := hub.Join("acme")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	hub.Close()
	select {
	case <-w.Done():
	default:
		t.Fatal("a parked wait survived Close")
	}
	if _, err := hub.Join("acme"); !errors.Is(err, feedwait.ErrClosed) {
		t.Fatalf("join after Close: %v", err)
	}
}

// TestMetricsNameNoTenantAndCostOneQueryASecond: /metrics is
// unauthenticated, so the feed's metrics carry no label naming a tenant;
// and a flood of scrapes reads the stalls at most once per second.
func TestMetricsNameNoTenantAndCostOneQueryASecond(t *testing.T) {
	t.Parallel()
	base := pgtest.NewPool(t)
	cfg := base.Config().Copy()
	var queries atomic.Int64
	cfg.ConnConfig.Tracer = countQueries{&queries}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// A tenant lagging: an event held back by an open transaction.
	insert := `INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
		VALUES ('secret-tenant-name', $1, 'pay', 'alice', 'test', 'spend', 'issued', 'consumed', 1)`
	if _, err := base.Exec(t.Context(), insert, "tok_read"); err != nil {
		t.Fatal(err)
	}
	for n := int64(0); n == 0; time.Sleep(5 * time.Millisecond) {
		if n, err = event.Position(t.Context(), base, "secret-tenant-name"); err != nil {
			t.Fatal(err)
		}
	}
	open, err := base.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(t.Context())
	if _, err := open.Exec(t.Context(), insert, "tok_open"); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Exec(t.Context(), insert, "tok_held"); err != nil {
		t.Fatal(err)
	}
	hub, err := feedwait.New(feedwait.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(hub.Collectors()...)
	start := time.Now()
	lagging := -1.0
	for range 200 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" || strings.Contains(l.GetValue(), "secret-tenant-name") {
						t.Fatalf("%s names a tenant: %v", mf.GetName(), l)
					}
				}
				if mf.GetName() == "tokend_event_feed_lagging_tenants" {
					lagging = m.GetGauge().GetValue()
				}
			}
		}
	}
	// Each reading is two statements (event.Stalls); one reading per
	// started second at most.
	readings := int64(time.Since(start)/time.Second) + 1
	if n := queries.Load(); n > 2*readings || lagging != 1 {
		t.Fatalf("200 scrapes in %v: %d statements (want at most %d), %v lagging tenants (want 1)", time.Since(start), n, 2*readings, lagging)
	}
}

type countQueries struct{ n *atomic.Int64 }

func (c countQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (countQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
