package event_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// benchSizes are the feed sizes the benchmarks run at: 10^4 and 10^5 by
// default, TOKEND_BENCH_EVENTS (comma-separated) to go further, e.g.
// 10000,10000000 to check that the cost stays flat at 10^7 events.
func benchSizes() []int {
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("TOKEND_BENCH_EVENTS"); s != "" {
		sizes = nil
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1000 {
				panic("TOKEND_BENCH_EVENTS: want sizes of at least 1000, comma-separated")
			}
			sizes = append(sizes, n)
		}
	}
	return sizes
}

// BenchmarkFeed measures, on a feed of n positioned events: reading a page
// of 100 near its end (a follower keeping up), and positioning then reading
// 100 newly written events (what a read costs while writers commit).
func BenchmarkFeed(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			pool := pgtest.NewPool(b)
			tokentest.Trail(b, pool, "t", n)
			b.Run("read", func(b *testing.B) {
				for b.Loop() {
					page, err := event.Read(ctx, pool, "t", event.Query{After: int64(n - 100), Limit: 100})
					if err != nil || len(page) != 100 {
						b.Fatalf("read = %d, %v", len(page), err)
					}
				}
			})
			b.Run("position+read", func(b *testing.B) {
				after := int64(n)
				for b.Loop() {
					b.StopTimer()
					if _, err := pool.Exec(ctx, `
						INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
						SELECT 't', 'new_' || g, 'pay', 'alice', 'bench', 'spend', 'issued', 'consumed', 0
						FROM generate_series(1, 100) g`); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					page, err := event.Read(ctx, pool, "t", event.Query{After: after, Limit: 100})
					if err != nil {
						b.Fatal(err)
					}
					if len(page) > 0 {
						after = page[len(page)-1].Position
					}
				}
			})
		})
	}
}
