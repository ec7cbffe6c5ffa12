package inspect_test

import (
	"context"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/token"
)

// BenchmarkListRareState compares an operator's list of the five unknown
// tokens among many (TOKEND_BENCH_LIST_TOKENS, default 200,000) with the
// direct index query for them, through pgx's prepared statements under
// Postgres's default plan choice and under forced generic plans. Issue 18
// asks the list to stay within 2× the direct query.
//
//	go test -run '^$' -bench ListRareState ./inspect
func BenchmarkListRareState(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("TOKEND_BENCH_LIST_TOKENS")); err == nil && v > 0 {
		n = v
	}
	url := ledgertest.NewURL(b)
	seed, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	seedStates(b, seed, n)
	seed.Close()
	direct := `SELECT ` + inspect.Columns + ` FROM tokens WHERE tenant_id = $1 AND state = $2 ORDER BY id DESC LIMIT $3`
	for _, mode := range []string{"auto", "force_generic_plan"} {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = mode
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode+"/list", func(b *testing.B) {
			for b.Loop() {
				items, _, err := inspect.List(b.Context(), pool, "big", inspect.Filter{State: token.Unknown})
				if err != nil || len(items) != 5 {
					b.Fatalf("list: %d items, %v", len(items), err)
				}
			}
		})
		b.Run(mode+"/direct", func(b *testing.B) {
			for b.Loop() {
				rows, err := pool.Query(b.Context(), direct, "big", "unknown", inspect.DefaultLimit+1)
				if err != nil {
					b.Fatal(err)
				}
				rows.Close()
			}
		})
		pool.Close()
	}
}
