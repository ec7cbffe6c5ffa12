package metrics_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/metrics"
	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/token"
)

// Metrics is what the cache reports to.
var _ cache.Observer = (*metrics.Metrics)(nil)

// Realistic values that must never reach a label.
const (
	secret  = "tks_3q2-7wZ_kTq0sBVmW4mT0lHc1oVfJ7m2uR8n9pQxYzA"
	apiKey  = "tkd_Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5"
	subject = "user-42@example.com"
	tenant  = "acme-payments"
)

// forbidden are the substrings no label value may contain: secret and key
// prefixes, token ids, subjects and tenants.
var forbidden = []string{"tks_", "tkd_", "tok_", subject, tenant}

// TestScrape records through every entry point with the values a real
// server sees, scrapes Handler, and checks the families, a few values, and
// that no label carries anything a caller sent.
func TestScrape(t *testing.T) {
	ctx := context.Background()
	tokenID := token.NewID()
	pool, err := pgxpool.New(ctx, "postgres://tokend@127.0.0.1:1/none?pool_max_conns=7")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var statsHadDeadline bool
	m, err := metrics.New(metrics.Config{
		Pool: pool,
		Stats: func(ctx context.Context) (metrics.Stats, error) {
			_, statsHadDeadline = ctx.Deadline()
			return metrics.Stats{Pending: 3, Unknown: 1, OldestPendingAge: 90 * time.Second, OldestUnknownAge: time.Hour}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	gin.SetMode(gin.TestMode)
	e := gin.New()
	e.Use(gin.RecoveryWithWriter(io.Discard), m.Middleware()) // as httpapi: recovery outside, metrics inside
	e.GET("/v1/tokens/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
	e.POST("/v1/tokens/:id/complete", func(c *gin.Context) { panic("handler bug") })
	e.POST("/v1/tokens/consume", func(c *gin.Context) { c.Status(http.StatusGone) })
	requests := []struct {
		method, target, body string
	}{
		{http.MethodGet, "/v1/tokens/" + tokenID + "?token=" + secret, ""},
		{http.MethodPost, "/v1/tokens/consume", `{"token":"` + secret + `","subject":"` + subject + `"}`},
		{http.MethodGet, "/" + tenant + "/" + secret, ""},
		{"TKS_" + secret[4:12], "/v1/tokens/" + tokenID, ""},
		{http.MethodPost, "/v1/tokens/" + tokenID + "/complete", `{"generation":1}`},
	}
	for _, r := range requests {
		req := httptest.NewRequest(r.method, r.target, strings.NewReader(r.body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		e.ServeHTTP(httptest.NewRecorder(), req)
	}

	m.ObserveIssue(metrics.IssueCreated)
	m.ObserveIssue(metrics.IssueOutcome(secret))
	m.ObserveSpend(metrics.SpendReplayed)
	m.ObserveSpend(metrics.SpendOutcome(tokenID))
	m.ObserveCache(tenant, subject)
	m.ObserveSecretInURL("query")
	m.ObserveSecretInURL(secret)
	m.ObserveCache("apikey", "forged")

	// The cache, driven for real, reports to m.
	mr := redistest.Mini(t)
	c, err := cache.New(cache.Config{URL: "redis://" + mr.Addr(), Observer: m, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Consumed: only tokens in a terminal state are cached.
	rec := token.Record{Tenant: tenant, ID: tokenID, Subject: subject, State: token.Consumed, RetainUntil: time.Now().Add(time.Hour)}
	for range 2 {
		c.GetOrLoad(ctx, tenant, tokenID, func(context.Context) (token.Record, error) { return rec, nil })
	}
	secretHash := sha256.Sum256([]byte(secret))
	c.Rejected(ctx, tenant, secretHash[:], "ledger.credit", subject)

	fams := scrape(t, m)

	for _, name := range []string{
		"tokend_http_requests_total", "tokend_http_request_duration_seconds",
		"tokend_issues_total", "tokend_spends_total",
		"tokend_cache_operations_total", "tokend_cache_breaker_state", "tokend_cache_forged_total", "tokend_secret_in_url_total",
		"tokend_db_pool_acquired_conns", "tokend_db_pool_max_conns", "tokend_db_pool_acquires_total",
		"tokend_tokens_unresolved", "tokend_tokens_unresolved_oldest_age_seconds", "tokend_tokens_unresolved_errors_total",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if fams[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}

	for name, f := range fams {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				for _, bad := range forbidden {
					if strings.Contains(l.GetValue(), bad) {
						t.Errorf("%s{%s=%q} carries %q", name, l.GetName(), l.GetValue(), bad)
					}
				}
			}
		}
	}

	values := []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"tokend_http_requests_total", map[string]string{"method": "GET", "route": "/v1/tokens/:id", "status": "200"}, 1},
		{"tokend_http_requests_total", map[string]string{"method": "POST", "route": "/v1/tokens/consume", "status": "410"}, 1},
		{"tokend_http_requests_total", map[string]string{"method": "GET", "route": "unmatched", "status": "404"}, 1},
		{"tokend_http_requests_total", map[string]string{"method": "other", "route": "unmatched", "status": "404"}, 1},
		{"tokend_http_requests_total", map[string]string{"method": "POST", "route": "/v1/tokens/:id/complete", "status": "500"}, 1},
		{"tokend_issues_total", map[string]string{"outcome": "created"}, 1},
		{"tokend_issues_total", map[string]string{"outcome": "other"}, 1},
		{"tokend_issues_total", map[string]string{"outcome": "rejected"}, 0},
		{"tokend_spends_total", map[string]string{"outcome": "replayed"}, 1},
		{"tokend_spends_total", map[string]string{"outcome": "other"}, 1},
		{"tokend_cache_operations_total", map[string]string{"kind": "token", "result": "miss"}, 1},
		{"tokend_cache_operations_total", map[string]string{"kind": "token", "result": "hit"}, 1},
		{"tokend_cache_operations_total", map[string]string{"kind": "secret", "result": "miss"}, 1},
		{"tokend_cache_operations_total", map[string]string{"kind": "apikey", "result": "miss"}, 0},
		{"tokend_cache_operations_total", map[string]string{"kind": "other", "result": "other"}, 1},
		{"tokend_cache_operations_total", map[string]string{"kind": "apikey", "result": "forged"}, 1},
		{"tokend_cache_forged_total", map[string]string{"kind": "apikey"}, 1},
		{"tokend_cache_forged_total", map[string]string{"kind": "token"}, 0},
		{"tokend_cache_breaker_state", map[string]string{"state": "closed"}, 1},
		{"tokend_cache_breaker_state", map[string]string{"state": "open"}, 0},
		{"tokend_tokens_unresolved", map[string]string{"state": "pending"}, 3},
		{"tokend_tokens_unresolved", map[string]string{"state": "unknown"}, 1},
		{"tokend_tokens_unresolved_oldest_age_seconds", map[string]string{"state": "pending"}, 90},
		{"tokend_tokens_unresolved_oldest_age_seconds", map[string]string{"state": "unknown"}, 3600},
		{"tokend_tokens_unresolved_errors_total", nil, 0},
		{"tokend_db_pool_max_conns", nil, 7},
		{"tokend_secret_in_url_total", map[string]string{"part": "query"}, 1},
		{"tokend_secret_in_url_total", map[string]string{"part": "path"}, 0},
		{"tokend_secret_in_url_total", map[string]string{"part": "other"}, 1},
	}
	for _, v := range values {
		got, ok := value(fams[v.family], v.labels)
		if !ok || got != v.want {
			t.Errorf("%s%v = %v (found %v), want %v", v.family, v.labels, got, ok, v.want)
		}
	}
	if n := histogramCount(fams["tokend_http_request_duration_seconds"], map[string]string{"method": "GET", "route": "/v1/tokens/:id"}); n != 1 {
		t.Errorf("latency observations of GET /v1/tokens/:id = %d, want 1", n)
	}
	if !statsHadDeadline {
		t.Error("Stats was called without a deadline")
	}

	problems, err := promlint.NewWithMetricFamilies(families(fams)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestStatsFailure: a Stats that fails leaves its gauges out and is
// counted; the scrape itself still succeeds.
func TestStatsFailure(t *testing.T) {
	m, err := metrics.New(metrics.Config{
		Stats:      func(context.Context) (metrics.Stats, error) { return metrics.Stats{}, errors.New("database down") },
		StatsEvery: -1, // every scrape calls it: this test counts failures, not calls
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		fams := scrape(t, m)
		if fams["tokend_tokens_unresolved"] != nil || fams["tokend_tokens_unresolved_oldest_age_seconds"] != nil {
			t.Error("gauges reported although Stats failed")
		}
		if got, _ := value(fams["tokend_tokens_unresolved_errors_total"], nil); got != float64(i) {
			t.Errorf("scrape %d: errors = %v, want %d", i, got, i)
		}
	}
}

// TestNilRecordsNothing: handlers record unconditionally, with or without
// metrics configured.
func TestNilRecordsNothing(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveIssue(metrics.IssueCreated)
	m.ObserveSpend(metrics.SpendExecuted)
	m.ObserveCache("token", "hit")
	m.ObserveBreaker("open")
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     metrics.Config
		wantErr bool
	}{
		{"zero", metrics.Config{}, false},
		{"timeout", metrics.Config{StatsTimeout: time.Second}, false},
		{"negative timeout", metrics.Config{StatsTimeout: -time.Second}, true},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("%s: Validate = %v, want error %v", tt.name, err, tt.wantErr)
		}
		if _, err := metrics.New(tt.cfg); (err != nil) != tt.wantErr {
			t.Errorf("%s: New = %v, want error %v", tt.name, err, tt.wantErr)
		}
	}
}

// scrape GETs m.Handler and parses the answer.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of f's series with exactly labels.
func value(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if mt := series(f, labels); mt != nil {
		switch {
		case mt.Counter != nil:
			return mt.Counter.GetValue(), true
		case mt.Gauge != nil:
			return mt.Gauge.GetValue(), true
		case mt.Untyped != nil:
			return mt.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func histogramCount(f *dto.MetricFamily, labels map[string]string) uint64 {
	if mt := series(f, labels); mt != nil && mt.Histogram != nil {
		return mt.Histogram.GetSampleCount()
	}
	return 0
}

func series(f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	for _, mt := range f.GetMetric() {
		if len(mt.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range mt.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if match {
			return mt
		}
	}
	return nil
}

func families(m map[string]*dto.MetricFamily) []*dto.MetricFamily {
	var out []*dto.MetricFamily
	for _, f := range m {
		out = append(out, f)
	}
	return out
}

// TestStatsAreReadOncePerInterval: /metrics is unauthenticated; a flood of
// scrapes calls Stats (a database query) at most once per ReadEvery.
func TestStatsAreReadOncePerInterval(t *testing.T) {
	var calls atomic.Int64
	m, err := metrics.New(metrics.Config{
		Stats: func(context.Context) (metrics.Stats, error) { calls.Add(1); return metrics.Stats{Pending: 1}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if got, _ := value(scrape(t, m)["tokend_tokens_unresolved"], map[string]string{"state": "pending"}); got != 1 {
					t.Errorf("pending = %v, want 1", got)
				}
			}
		})
	}
	wg.Wait()
	if n, most := calls.Load(), int64(time.Since(start)/metrics.ReadEvery)+1; n > most {
		t.Fatalf("200 scrapes in %v called Stats %d times; want at most %d", time.Since(start), n, most)
	}
}
