package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// BenchmarkParkedWaiters measures, in one run, the median latency of other
// requests (GET /v1/tokens/{id}, one at a time, over HTTP) without long polls
// of the event feed and with 1,000 parked on empty feeds of 10 tenants, in
// three alternating rounds; and the statements per second the database receives while
// those 1,000 wait with nothing to answer. It reports parked/idle, the ratio
// of the median with waiters to the median of the runs without (issue 28's
// target: at most 1.2), and idle_stmts/s. Run it once:
//
//	go test -run '^$' -bench BenchmarkParkedWaiters -benchtime 1x ./internal/serve/httpapi/
func BenchmarkParkedWaiters(b *testing.B) {
	const waiters, tenants, samples, rounds = 1000, 10, 300, 3
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	keyring := tokentest.Keys(b)
	spender, err := consume.New(consume.Config{Handlers: ledgerHandlers(), Keys: keyring})
	if err != nil {
		b.Fatal(err)
	}
	hub, err := feedwait.New(feedwait.Config{Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Pool: pool, Spender: spender, FeedWaiters: hub,
		Issuer: intent.NewIssuer(keyring, intent.WithHandlers(spender.Handlers())), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	keys := make([]string, tenants)
	for i := range keys {
		if _, keys[i], err = apikey.Create(ctx, pool, fmt.Sprintf("tenant-%d", i), apikey.Client); err != nil {
			b.Fatal(err)
		}
	}
	do := func(c *http.Client, ctx context.Context, method, path, key, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "bench")
		}
		res, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	// The other requests' tenant has an event; the waiters' have none.
	_, otherKey, err := apikey.Create(ctx, pool, "other", apikey.Client)
	if err != nil {
		b.Fatal(err)
	}
	other := &http.Client{}
	status, body := do(other, ctx, http.MethodPost, "/v1/tokens", otherKey, `{"operation":"ledger.credit","subject":"s","ttl_seconds":600}`)
	if status != http.StatusCreated {
		b.Fatalf("issue: %d %s", status, body)
	}
	id := body[strings.Index(body, `"id":"`)+6:]
	id = id[:strings.Index(id, `"`)]
	// sample adds samples latencies of other requests to d.
	sample := func(d *[]time.Duration) {
		for range samples {
			start := time.Now()
			if status, body := do(other, ctx, http.MethodGet, "/v1/tokens/"+id, otherKey, ""); status != http.StatusOK {
				b.Fatalf("get: %d %s", status, body)
			}
			*d = append(*d, time.Since(start))
		}
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	for b.Loop() {
		// Rounds without and with waiters alternate, so that the machine's
		// drift falls on both.
		var idle, withWaiters []time.Duration
		var idleStmts float64
		for round := range rounds {
			sample(&idle)
			park, unpark := context.WithCancel(ctx)
			parker := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waiters}}
			var wg sync.WaitGroup
			var failed sync.Once
			for i := range waiters {
				wg.Go(func() {
					status, body := do(parker, park, http.MethodGet, "/v1/events?wait=30", keys[i%tenants], "")
					if status != http.StatusOK && park.Err() == nil {
						failed.Do(func() { b.Errorf("waiter: %d %s", status, body) })
					}
				})
			}
			parked(b, hub, waiters)
			time.Sleep(time.Second) // past the first poll's wake-up
			if round == 0 {
				before := tracer.n.Load()
				const quiet = 5 * time.Second
				time.Sleep(quiet)
				idleStmts = float64(tracer.n.Load()-before) / quiet.Seconds()
			}
			sample(&withWaiters)
			unpark()
			wg.Wait()
		}
		sample(&idle)
		b.ReportMetric(float64(median(withWaiters))/float64(median(idle)), "parked/idle")
		b.ReportMetric(idleStmts, "idle_stmts/s")
		b.ReportMetric(float64(median(idle).Microseconds()), "idle_µs")
		b.ReportMetric(float64(median(withWaiters).Microseconds()), "parked_µs")
	}
}
