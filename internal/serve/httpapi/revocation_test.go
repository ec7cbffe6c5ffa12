package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

// watchRevocations wires apikey.Watch to the server as cmd/tokend does and
// returns a channel that receives each revoked key's hash once ForgetKey
// has returned for it. It returns once Watch listens.
func (a *api) watchRevocations() <-chan []byte {
	a.t.Helper()
	forgotten := make(chan []byte, 16)
	listening := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- apikey.Watch(ctx, a.pool,
			func(h []byte) { a.srv.ForgetKey(ctx, h); forgotten <- h },
			func() { a.srv.ForgetAllKeys(); listening <- struct{}{} },
			slog.New(slog.DiscardHandler))
	}()
	a.t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			a.t.Errorf("Watch = %v, want context.Canceled", err)
		}
	})
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		a.t.Fatal("Watch not listening after 10s")
	}
	return forgotten
}

// A key revoked by any process is refused at the next request, however long
// its resolution would otherwise be cached, in process or in Redis.
func TestRevocationReachesEveryCache(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		configure func(t *testing.T) func(*httpapi.Config)
	}{
		{"in process", func(*testing.T) func(*httpapi.Config) {
			return func(c *httpapi.Config) { c.KeyCacheTTL = time.Hour }
		}},
		{"redis and in process", func(t *testing.T) func(*httpapi.Config) {
			withRedis := withCache(t, redistest.URL(), &observer{}, func(c *cache.Config) { c.KeyTTL = time.Hour })
			return func(c *httpapi.Config) { withRedis(c); c.KeyCacheTTL = time.Hour }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAPI(t, tt.configure(t))
			forgotten := a.watchRevocations()
			key, id := a.client(), a.keyIDs["acme/client"]
			if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Fatalf("live key: %d %s", res.status, res.body)
			}

			// Control: a revocation nobody is told of leaves the cached key
			// working, so what refuses it below is the broadcast.
			if _, err := a.pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if res := a.get(key, "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Fatalf("revoked without a word: %d %s; want 200 from the cache (is the cache on?)", res.status, res.body)
			}

			// As `tokend keys revoke` without TOKEND_REDIS_URL does: nothing
			// but Postgres hears of it.
			if _, err := apikey.Revoke(t.Context(), a.pool, "acme", id); err != nil {
				t.Fatal(err)
			}
			select {
			case h := <-forgotten:
				if want := sha256.Sum256([]byte(key)); !bytes.Equal(h, want[:]) {
					t.Fatalf("forgot key hash %x, want %x", h, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the revocation was not heard within 10s")
			}
			wantProblem(t, a.get(key, "/v1/ledger/accounts/x"), http.StatusUnauthorized, "unauthorized")
			// Other keys are untouched.
			if res := a.get(a.operator(), "/v1/ledger/accounts/x"); res.status != http.StatusOK {
				t.Errorf("another key after the revocation: %d %s", res.status, res.body)
			}
		})
	}
}
