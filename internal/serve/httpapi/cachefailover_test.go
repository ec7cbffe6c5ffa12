package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestCacheTrueThroughRedisSnapshot is a Redis failover that loses the last
// writes and deletes, made deterministic: three instances share a Postgres
// and a Redis; every token and an API key are read through every instance,
// so the cache holds what it will; Redis is snapshotted (DUMP of every key);
// then tokens are spent and revoked and the key revoked, each answered, with
// every invalidation written; then Redis is served from the snapshot
// (FLUSHALL and RESTORE), as a promoted replica that missed them, or a
// restart from an old RDB, would. Every read through every instance must
// show what Postgres holds, and the revoked key must be refused.
func TestCacheTrueThroughRedisSnapshot(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	url := "redis://" + rs.addr + "/0"
	macKey := cache.MACKey([]byte("the server key every instance has"))
	withShared := func(hc *httpapi.Config) {
		c, err := cache.New(cache.Config{URL: url, Prefix: "tokend-test:", MACKey: macKey, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hc.Cache = c
	}
	pool := pgtest.NewPool(t)
	servers := []*api{newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared)}
	key, op := servers[0].client(), servers[0].operator()

	// Tokens to spend, to revoke, to leave issued, and one already spent.
	var toSpend, toRevoke []issued
	for i := range 4 {
		toSpend = append(toSpend, servers[0].issue(key, fmt.Sprint("fo-spend-", i), creditBody("fay", 1)))
		toRevoke = append(toRevoke, servers[0].issue(key, fmt.Sprint("fo-revoke-", i), creditBody("fay", 1)))
	}
	spent := servers[0].issue(key, "fo-spent", creditBody("fay", 1))
	if res := servers[1].post(key, "/v1/tokens/consume", consumeBody(spent, "fay", 1)); res.status != http.StatusOK {
		t.Fatalf("consume: %d %s", res.status, res.body)
	}
	all := append(append(append([]issued{}, toSpend...), toRevoke...), spent)
	readAll := func(stage string) {
		t.Helper()
		for _, s := range servers {
			for _, tok := range all {
				res := s.get(key, "/v1/tokens/"+tok.ID)
				if res.status != http.StatusOK {
					t.Fatalf("%s: read %s: %d %s", stage, tok.ID, res.status, res.body)
				}
				var got struct {
					State string `json:"state"`
				}
				if err := json.Unmarshal(res.body, &got); err != nil {
					t.Fatal(err)
				}
				if want, _ := servers[0].tokenState(tok.ID); got.State != string(want) {
					t.Errorf("%s: read of %s shows %s, Postgres holds %s", stage, tok.ID, got.State, want)
				}
			}
		}
	}
	readAll("before the snapshot")

	// An API key, resolved by every instance.
	revokedKey, revokedSecret := newKey(t, servers[0])
	for _, s := range servers {
		if res := s.get(revokedSecret, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
			t.Fatalf("live key: %d %s", res.status, res.body)
		}
	}

	ctx := context.Background()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	snapshot := dumpAll(t, rdb)
	t.Logf("snapshot of %d keys", len(snapshot))

	// The changes, each answered, their invalidations written.
	for i, tok := range toSpend {
		if res := servers[i%3].post(key, "/v1/tokens/consume", consumeBody(tok, "fay", 1)); res.status != http.StatusOK {
			t.Fatalf("consume: %d %s", res.status, res.body)
		}
	}
	for i, tok := range toRevoke {
		if res := servers[i%3].post(op, "/v1/admin/tokens/"+tok.ID+"/revoke", `{"reason":"failover test"}`); res.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", res.status, res.body)
		}
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(revokedSecret))
	for _, s := range servers { // what apikey.Watch does on each instance
		s.srv.ForgetKey(ctx, h[:])
	}

	// Failover: Redis is what it was at the snapshot.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for k, e := range snapshot {
		if err := rdb.RestoreReplace(ctx, k, e.ttl, e.dump).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}

	readAll("after the failover")
	for _, s := range servers {
		wantProblem(t, s.get(revokedSecret, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
	}
	// One effect per spend, whatever Redis said.
	if got := servers[0].balance("acme", "fay"); got != int64(len(toSpend)+1) {
		t.Errorf("balance = %d, want %d", got, len(toSpend)+1)
	}
}

// newKey creates another client key of acme's.
func newKey(t *testing.T, a *api) (apikey.Key, string) {
	t.Helper()
	k, secret, err := apikey.Create(context.Background(), a.pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	return k, secret
}

type dumped struct {
	dump string
	ttl  time.Duration
}

// dumpAll DUMPs every key of rdb's database, with its TTL.
func dumpAll(t *testing.T, rdb *redis.Client) map[string]dumped {
	t.Helper()
	ctx := context.Background()
	out := map[string]dumped{}
	iter := rdb.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 {
			ttl = 0
		}
		out[k] = dumped{d, ttl}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
