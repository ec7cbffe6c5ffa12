package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	// One request per 100 s after a burst of 2: the third is refused however
	// slow the machine is.
	a := newAPI(t, func(c *httpapi.Config) { c.RateLimit = httpapi.RateLimit{PerSecond: 0.01, Burst: 2} })
	client, other := a.client(), a.key("globex", apikey.Client)

	for i := range 2 {
		if res := a.get(client, "/v1/ledger/accounts/alice"); res.status != http.StatusOK {
			t.Fatalf("request %d within the burst: %d %s", i, res.status, res.body)
		}
	}
	res := a.get(client, "/v1/ledger/accounts/alice")
	wantProblem(t, res, http.StatusTooManyRequests, "rate_limited")
	secs, err := strconv.Atoi(res.header.Get("Retry-After"))
	if err != nil || secs < 1 || secs > 100 {
		t.Fatalf("Retry-After = %q, want whole seconds up to 100", res.header.Get("Retry-After"))
	}
	// Buckets are per key: another key is not held back.
	if res := a.get(other, "/v1/ledger/accounts/alice"); res.status != http.StatusOK {
		t.Fatalf("another key: %d %s", res.status, res.body)
	}
	// A refused request is not counted against the key: still refused, not worse.
	res = a.get(client, "/v1/ledger/accounts/alice")
	wantProblem(t, res, http.StatusTooManyRequests, "rate_limited")
	if again, _ := strconv.Atoi(res.header.Get("Retry-After")); again > secs {
		t.Fatalf("Retry-After grew from %d to %d: refused requests were charged", secs, again)
	}
}

// TestRateLimitAcrossInstances: two servers sharing a Redis share each key's
// bucket, so together they allow the burst once, not once each; with Redis
// gone, each limits on its own.
func TestRateLimitAcrossInstances(t *testing.T) {
	t.Parallel()
	limit := func(c *httpapi.Config) { c.RateLimit = httpapi.RateLimit{PerSecond: 0.01, Burst: 3} }
	for _, tc := range []struct {
		name    string
		url     string
		allowed int
	}{
		{"shared Redis", redistest.URL(), 3},
		{"Redis down", "redis://127.0.0.1:1/0", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			share := withCache(t, tc.url, &observer{}, func(c *cache.Config) { c.Timeout = 200 * time.Millisecond })
			a := newAPI(t, limit, share)
			b := newAPIOn(t, a.pool, limit, share)
			key := a.client()
			allowed := 0
			for i := range 12 {
				srv := a
				if i%2 == 1 {
					srv = b
				}
				switch res := srv.get(key, "/v1/ledger/accounts/alice"); res.status {
				case http.StatusOK:
					allowed++
				case http.StatusTooManyRequests:
				default:
					t.Fatalf("request %d: %d %s", i, res.status, res.body)
				}
			}
			if allowed != tc.allowed {
				t.Errorf("two servers allowed %d of 12 requests, want %d", allowed, tc.allowed)
			}
		})
	}
}
