package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/infra/tracing"
	"github.com/tokend/tokend/internal/serve/feedwait"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// benchConfig returns the configuration of a server for the benchmarks, on
// a migrated database of its own with the ledger's handlers, and a client
// key of tenant acme.
func benchConfig(b testing.TB) (httpapi.Config, string) {
	pool := ledgertest.NewPool(b)
	keyring := tokentest.Keys(b)
	spender, err := consume.New(consume.Config{Handlers: ledgerHandlers(), Keys: keyring})
	if err != nil {
		b.Fatal(err)
	}
	_, key, err := apikey.Create(context.Background(), pool, "acme", apikey.Client)
	if err != nil {
		b.Fatal(err)
	}
	return httpapi.Config{Pool: pool, Issuer: intent.NewIssuer(keyring, intent.WithHandlers(spender.Handlers())), Spender: spender}, key
}

// BenchmarkGetToken reads one token over the API from Postgres and through
// the Redis cache, in the same run, so the figures compare: an issued token
// (which the cache answers only from Postgres, since it may still change)
// and a revoked one (terminal, which it answers itself).
func BenchmarkGetToken(b *testing.B) {
	base, key := benchConfig(b)
	c, err := cache.New(cache.Config{URL: redistest.URL(), Prefix: fmt.Sprintf("tokend-bench:%d:", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	for _, bc := range []struct {
		name  string
		cache *cache.Cache
	}{{"postgres", nil}, {"redis", c}} {
		cfg := base
		cfg.Cache, cfg.Logger = bc.cache, slog.New(slog.DiscardHandler)
		srv, err := httpapi.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, state := range []string{"issued", "revoked"} {
			req := httptest.NewRequest(http.MethodPost, "/v1/tokens", bytes.NewBufferString(`{"operation":"ledger.credit","subject":"s","ttl_seconds":600}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "bench-"+bc.name+"-"+state)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			var tok struct{ ID string }
			if err := json.Unmarshal(rec.Body.Bytes(), &tok); err != nil || rec.Code != http.StatusCreated {
				b.Fatalf("issue: %d %s", rec.Code, rec.Body)
			}
			if state == "revoked" {
				if _, err := admin.Revoke(context.Background(), base.Pool, "acme", tok.ID, admin.Revocation{Reason: "bench", Actor: "bench"}); err != nil {
					b.Fatal(err)
				}
			}
			b.Run(bc.name+"/"+state, func(b *testing.B) {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req := httptest.NewRequest(http.MethodGet, "/v1/tokens/"+tok.ID, nil)
						req.Header.Set("Authorization", "Bearer "+key)
						rec := httptest.NewRecorder()
						srv.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Errorf("get: %d", rec.Code)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkIssueAndSpend issues a ledger.credit token and spends it through
// the server's handler, with the access log written as JSON, as serve does:
// what tokend's own code costs per request, without the network.
func BenchmarkIssueAndSpend(b *testing.B) {
	cfg, key := benchConfig(b)
	cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	srv, err := httpapi.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	do := benchPost(b, srv, key)
	const payload = `{"account":"acct-1","amount":1}`
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		var tok struct{ Token string }
		if err := json.Unmarshal(do("/v1/tokens", fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), n),
			`{"operation":"ledger.credit","subject":"s","ttl_seconds":600,"payload":`+payload+`}`, http.StatusCreated), &tok); err != nil {
			b.Fatal(err)
		}
		do("/v1/tokens/consume", "", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"s","payload":`+payload+`}`, http.StatusOK)
	}
}

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
	cfg, err := pgxpool.ParseConfig(ledgertest.NewURL(b))
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

// BenchmarkTracingSpend is BenchmarkIssueAndSpend with tracing off (no
// Config.Tracer, no pgx tracer: what tokend serve runs without OTEL_*
// variables) and on (every request sampled, its spans and its statements'
// handed to a batch processor whose exporter discards them), in one run on
// one database, so the two compare. Run it with -count to interleave:
//
//	go test -run '^$' -bench BenchmarkTracingSpend -count 3 ./internal/serve/httpapi/
func BenchmarkTracingSpend(b *testing.B) {
	base, key := benchConfig(b)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	pc, err := pgxpool.ParseConfig(base.Pool.Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	pc.ConnConfig.Tracer = tracing.NewDB(tp)
	tracedPool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	defer tracedPool.Close()
	for _, bc := range []struct {
		name string
		pool *pgxpool.Pool
		tp   *sdktrace.TracerProvider
	}{{"off", base.Pool, nil}, {"on", tracedPool, tp}} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := base
			cfg.Pool, cfg.Logger = bc.pool, slog.New(slog.NewJSONHandler(io.Discard, nil))
			if bc.tp != nil {
				cfg.Tracer = bc.tp
			}
			srv, err := httpapi.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			do := benchPost(b, srv, key)
			const payload = `{"account":"acct-1","amount":1}`
			b.ReportAllocs()
			// The process's CPU time per op, tokend's side only: on a busy
			// machine the wall time is mostly waiting for Postgres's commits.
			cpu := func() time.Duration {
				var ru syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			cpu0 := cpu()
			defer func() { b.ReportMetric(float64(cpu()-cpu0)/float64(b.N), "cpu-ns/op") }()
			n := 0
			for b.Loop() {
				n++
				var tok struct{ Token string }
				if err := json.Unmarshal(do("/v1/tokens", fmt.Sprintf("bench-%s-%d-%d", bc.name, time.Now().UnixNano(), n),
					`{"operation":"ledger.credit","subject":"s","ttl_seconds":600,"payload":`+payload+`}`, http.StatusCreated), &tok); err != nil {
					b.Fatal(err)
				}
				do("/v1/tokens/consume", "", `{"token":"`+tok.Token+`","operation":"ledger.credit","subject":"s","payload":`+payload+`}`, http.StatusOK)
			}
		})
	}
}

// benchPost returns a function that POSTs body to srv's path with key, as
// the intent's Idempotency-Key when intentID is set, and fails b unless
// the status is want.
func benchPost(b testing.TB, srv http.Handler, key string) func(path, intentID, body string, want int) []byte {
	return func(path, intentID, body string, want int) []byte {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		if intentID != "" {
			req.Header.Set("Idempotency-Key", intentID)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != want {
			b.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
}
