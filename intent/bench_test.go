package intent_test

import (
	"context"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// benchRequest is a ledger.credit issue request for intent n, with a payload
// (so the digest and fingerprint are part of the work, as over the API).
func benchRequest(run string, n int64) intent.Request {
	return intent.Request{
		Tenant: tenant, Operation: "ledger.credit", IntentID: run + "-" + strconv.FormatInt(n, 10),
		Subject: "user-" + strconv.FormatInt(n%1000, 10), TTLSeconds: 600,
		Payload: []byte(`{"account":"acct-` + strconv.FormatInt(n%1000, 10) + `","amount":1}`), Actor: "bench",
	}
}

// BenchmarkIssue issues a new token per operation on a real, migrated
// database (pgtest): the policy lookup, secret derivation and digest in Go,
// then the one INSERT ... ON CONFLICT statement, autocommit. Each op is one
// durable commit, so on a server with fsync on the serial figure is bounded
// by the disk's flush latency and the parallel one by group commit.
// Compare with bench/issue.sql under pgbench (scripts/bench).
func BenchmarkIssue(b *testing.B) {
	pool := ledgertest.NewPool(b)
	keys := tokentest.Keys(b)
	is := intent.NewIssuer(keys, intent.WithHandlers(ledger.Handlers()))
	ctx := context.Background()
	var n atomic.Int64

	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := is.Issue(ctx, pool, benchRequest("s", n.Add(1))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(4) // 4 × GOMAXPROCS goroutines, within the pool's 20 connections
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := is.Issue(ctx, pool, benchRequest("p", n.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// A retry of an issued intent: the insert finds the intent taken, then a
	// transaction reads and locks the row and re-derives the secret.
	b.Run("replay", func(b *testing.B) {
		req := benchRequest("r", 0)
		if _, err := is.Issue(ctx, pool, req); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			out, err := is.Issue(ctx, pool, req)
			if err != nil || !out.Replayed {
				b.Fatalf("replay: %v, replayed %v", err, out.Replayed)
			}
		}
	})
}
