package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

// TestCacheForgedEntryIsLoggedWithRequestID: a token entry rewritten by
// someone who can write to Redis but lacks the server key is not served;
// the request is answered from Postgres, and the warning names the
// request's id and not the planted value.
func TestCacheForgedEntryIsLoggedWithRequestID(t *testing.T) {
	t.Parallel()
	obs := &observer{}
	var logs syncBuffer
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	// LocalTTL -1: the read must reach Redis, not this process's copy.
	c, err := cache.New(cache.Config{URL: redistest.URL(), Prefix: prefix, Observer: obs, Timeout: 2 * time.Second, LocalTTL: -1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), RequestID: httpapi.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := newAPI(t, func(hc *httpapi.Config) { hc.Cache = c })
	key := a.client()
	tok := a.issue(key, "forged-1", creditBody("fred", 1))
	// Spent, so that the read caches it: only terminal tokens are cached.
	if res := a.post(key, "/v1/tokens/consume", consumeBody(tok, "fred", 1)); res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	if res := a.get(key, "/v1/tokens/"+tok.ID); res.status != http.StatusOK {
		t.Fatalf("read: %d %s", res.status, res.body)
	}

	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, prefix+"*tok:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("token entries under the test's prefix: %v, %v", keys, err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), keys...) })
	// Well-formed in every way but the MAC: the version matches the state,
	// the tenant and id the key's.
	planted := fmt.Sprintf(`3:{"Tenant":"acme","ID":%q,"Operation":"ledger.credit","State":"consumed","Generation":0,"Subject":"PLANTED","RetainUntil":"2999-01-01T00:00:00Z"}`, tok.ID)
	if err := rdb.Set(ctx, keys[0], planted, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	res := a.do(request{method: http.MethodGet, path: "/v1/tokens/" + tok.ID, key: key, header: http.Header{httpapi.RequestIDHeader: {"req-forged-42"}}})
	if res.status != http.StatusOK || !strings.Contains(string(res.body), `"state":"consumed"`) || strings.Contains(string(res.body), "PLANTED") {
		t.Fatalf("read after the entry was forged: %d %s, want the consumed token from Postgres", res.status, res.body)
	}
	if n := obs.count("token/forged"); n != 1 {
		t.Errorf("forged counted %d times, want 1", n)
	}
	out := logs.String()
	if !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"request_id":"req-forged-42"`) || strings.Contains(out, "PLANTED") {
		t.Errorf("want a warning with the request id and without the value, got:\n%s", out)
	}
}
