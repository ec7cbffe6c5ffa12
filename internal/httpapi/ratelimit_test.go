package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/tokend/tokend/internal/apikey"
	"github.com/tokend/tokend/internal/httpapi"
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
