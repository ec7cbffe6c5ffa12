package faults

import (
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	tokend "github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/webhook"
)

// TestDispatcherKilledMidDelivery: tokend is killed (SIGKILL) while a
// webhook delivery is in flight, after the consumer applied it and before
// tokend recorded the answer. Another tokend sends it again once the lease
// runs out, and every other event too: every event is delivered at least
// once, and the consumer, deduplicating by event id in its own transaction,
// applies each exactly once.
func TestDispatcherKilledMidDelivery(t *testing.T) {
	t.Parallel()
	const tenant, tokens = "hooks", 12
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := ledgertest.NewURL(t)
	env := []string{"TOKEND_WEBHOOK_TIMEOUT=1s", "TOKEND_WEBHOOK_ALLOWED_HOSTS=127.0.0.1"} // leases of 3s; the consumer is on loopback
	a := proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: env})
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, sql := range []string{webhook.Schema, `CREATE TABLE effects (event_id text NOT NULL)`} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	var (
		secret    atomic.Value
		received  atomic.Int64
		holding   atomic.Bool
		held      = make(chan struct{})
		releaseIt = make(chan struct{})
	)
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		d, err := webhook.Receive(secret.Load().(string), r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			first, err := webhook.OnceTx(r.Context(), tx, d.Data.ID)
			if err != nil || !first {
				return err
			}
			_, err = tx.Exec(r.Context(), `INSERT INTO effects VALUES ($1)`, d.Data.ID)
			return err
		}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		// The first delivery is applied, then its answer is held until
		// the dispatcher that sent it is dead.
		if holding.CompareAndSwap(false, true) {
			close(held)
			<-releaseIt
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer consumer.Close()
	defer close(releaseIt)

	operator, err := tokend.New(a.URL, proctest.CreateKey(t, dbURL, tenant, "operator"))
	if err != nil {
		t.Fatal(err)
	}
	hook, err := operator.CreateWebhook(ctx, tokend.WebhookRequest{URL: consumer.URL})
	if err != nil {
		t.Fatal(err)
	}
	secret.Store(hook.Secret)
	c := newClient(t, a.URL, proctest.CreateKey(t, dbURL, tenant, "client"))
	c.issueAll(ctx, t, "order", tokens, func(i int) intent { return credit(fmt.Sprintf("acct-%d", i), 1) })

	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no delivery reached the consumer")
	}
	a.Kill()
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&pending); err != nil || pending == 0 {
		t.Fatalf("after the kill, %d deliveries pending (%v); want the one in flight at least", pending, err)
	}
	b := proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: env})
	_ = b

	for {
		var delivered int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = 'delivered'`).Scan(&delivered); err != nil {
			t.Fatal(err)
		}
		if delivered == tokens {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d deliveries delivered", delivered, tokens)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// Counted after, not beside, the deliveries: a delivery is marked only
	// after the consumer committed its effect, and on Citus one statement
	// reading the coordinator's effects and the workers' deliveries has no
	// single snapshot.
	var effects, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM effects`).Scan(&effects, &distinct); err != nil {
		t.Fatal(err)
	}
	if effects != tokens || distinct != tokens {
		t.Errorf("%d effects of %d events, want each of %d once", effects, distinct, tokens)
	}
	if received.Load() <= int64(tokens) {
		t.Errorf("%d deliveries received for %d events: the one in flight was not sent again", received.Load(), tokens)
	}
	t.Logf("%d events, %d deliveries received, %d effects", tokens, received.Load(), effects)
}
