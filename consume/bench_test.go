package consume_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/token"
)

// spendBench is a migrated database with an issuer and a ledger spender.
type spendBench struct {
	pool    *pgxpool.Pool
	issuer  *intent.Issuer
	spender *consume.Spender
	seq     atomic.Int64
}

func newSpendBench(b *testing.B) *spendBench {
	b.Helper()
	return newSpendBenchOn(b, ledgertest.NewPool(b))
}

// newSpendBenchOn is newSpendBench on a pool of the caller's.
func newSpendBenchOn(b *testing.B, pool *pgxpool.Pool) *spendBench {
	b.Helper()
	keys, err := token.NewKeyring("bench-server-key-0123456789abcdef0123456789")
	if err != nil {
		b.Fatal(err)
	}
	h := ledger.Handlers()
	s, err := consume.New(consume.Config{Handlers: h, Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	return &spendBench{pool: pool, issuer: intent.NewIssuer(keys, intent.WithHandlers(h)), spender: s}
}

// issue issues n ledger.credit tokens with 8 goroutines (untimed setup; the
// commits group) and returns spend requests for them, each spent once.
func (sb *spendBench) issue(b *testing.B, n int) []consume.Request {
	b.Helper()
	reqs := make([]consume.Request, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				k := sb.seq.Add(1)
				acct := "acct-" + strconv.FormatInt(k%1000, 10)
				payload := []byte(`{"account":"` + acct + `","amount":1}`)
				subject := "user-" + strconv.FormatInt(k%1000, 10)
				out, err := sb.issuer.Issue(context.Background(), sb.pool, intent.Request{
					Tenant: tenant, Operation: ledger.Credit, IntentID: "bench-" + strconv.FormatInt(k, 10),
					Subject: subject, TTLSeconds: 3600, Payload: payload, Actor: "bench",
				})
				if err != nil {
					failed.Store(err)
					return
				}
				reqs[i] = consume.Request{Tenant: tenant, Secret: out.Secret, Operation: ledger.Credit,
					Subject: subject, Payload: payload, Actor: "bench"}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("issue: %v", err)
	}
	return reqs
}

// BenchmarkSpend spends one ledger.credit token per operation with
// Spender.Spend on a real database: BEGIN, lock the token (batched with
// set_config), credit the ledger, store the outcome and its event, COMMIT;
// one durable commit per op. Tokens are issued before the timer starts.
// Compare with bench/spend.sql under pgbench (scripts/bench). With
// -cpuprofile it shows where tokend's own CPU goes on the spend path
// (the server's share is not in it).
func BenchmarkSpend(b *testing.B) {
	sb := newSpendBench(b)
	ctx := context.Background()

	b.Run("serial", func(b *testing.B) {
		reqs := sb.issue(b, b.N)
		b.ResetTimer()
		for i := range b.N {
			resp, err := sb.spender.Spend(ctx, sb.pool, reqs[i])
			if err != nil || resp.Status != http.StatusOK || resp.Replayed {
				b.Fatalf("spend: %v (status %d, replayed %v)", err, resp.Status, resp.Replayed)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		reqs := sb.issue(b, b.N)
		var next atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS goroutines, within the pool's 20 connections
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := sb.spender.Spend(ctx, sb.pool, reqs[next.Add(1)-1])
				if err != nil || resp.Status != http.StatusOK {
					b.Errorf("spend: %v (status %d)", err, resp.Status)
					return
				}
			}
		})
	})
	// A retried spend of a consumed token: the lock and the stored outcome,
	// no handler, nothing written (the commit has nothing to flush).
	b.Run("replay", func(b *testing.B) {
		req := sb.issue(b, 1)[0]
		if _, err := sb.spender.Spend(ctx, sb.pool, req); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			resp, err := sb.spender.Spend(ctx, sb.pool, req)
			if err != nil || !resp.Replayed {
				b.Fatalf("replay: %v (replayed %v)", err, resp.Replayed)
			}
		}
	})
}

// BenchmarkDecodeSpendRequest decodes a POST /v1/tokens/consume body with
// httpapi.Decode, the strict decoder every handler uses, into a struct of
// the request's shape: the JSON share of a spend before any database work.
func BenchmarkDecodeSpendRequest(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	body := []byte(`{"token":"tks_q1H7xZl0cM2m9sVnT3Jk8bYwR5eP4aLfU6gDhCiOoEs","operation":"ledger.credit","subject":"user-42","payload":{"account":"acct-42","amount":1}}`)
	var dst struct {
		Token     string          `json:"token"`
		Operation string          `json:"operation"`
		Subject   string          `json:"subject"`
		Payload   json.RawMessage `json:"payload"`
	}
	rec := httptest.NewRecorder()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		c, _ := gin.CreateTestContext(rec)
		c.Request = httptest.NewRequest(http.MethodPost, "/v1/tokens/consume", bytes.NewReader(body))
		if err := httpapi.Decode(c, &dst); err != nil {
			b.Fatal(err)
		}
	}
}
