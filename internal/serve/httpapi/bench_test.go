package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// benchConfig returns the configuration of a server for the benchmarks, on
// a migrated database of its own with the ledger's handlers, and a client
// key of tenant acme.
func benchConfig(b *testing.B) (httpapi.Config, string) {
	pool := pgtest.NewPool(b)
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
				if _, err := admin.Revoke(context.Background(), base.Pool, "acme", tok.ID, "bench", "bench"); err != nil {
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
	do := func(path, intentID, body string, want int) []byte {
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
