package consume_test

import (
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
)

// The benchmarks of this file report CPU per operation, not time: on a
// shared machine a rate measures how the processes split the CPUs, while the
// CPU a process spends per operation barely moves. scripts/bench-cpu runs
// them with Postgres and the benchmark each pinned to a core of their own.
//
//	pg-us/op  Postgres' CPU per operation: the whole cluster whose postmaster
//	          is TOKEND_BENCH_PG_PID (it and its live children, plus the
//	          children it has reaped, so exited backends count), or, without
//	          it, the backends of the benchmark's own connections only.
//	go-us/op  this process's CPU per operation (the Spender and pgx).
//	ops/s     the rate, for what it is worth on a shared machine.

// ticks is /proc's clock tick, USER_HZ, which is 100 on every Linux build.
const ticks = 100

// procTicks returns utime+stime of pid, and with children cutime+cstime as
// well (the CPU of the children it has waited for).
func procTicks(pid int, children bool) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // f[0] is field 3, the state
	n := 2
	if children {
		n = 4
	}
	var sum int64
	for _, x := range f[11 : 11+n] { // fields 14-17: utime stime cutime cstime
		v, _ := strconv.ParseInt(x, 10, 64)
		sum += v
	}
	return sum
}

// pgCPU reads Postgres' CPU, in ticks, as pg-us/op counts it.
type pgCPU struct {
	postmaster int
	backends   sync.Map // pid -> struct{}: the pool's connections
}

func (p *pgCPU) read() int64 {
	var sum int64
	if p.postmaster != 0 {
		sum = procTicks(p.postmaster, true)
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			s := string(b)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
			if f[1] == strconv.Itoa(p.postmaster) { // field 4, the parent
				sum += procTicks(pid, false)
			}
		}
		return sum
	}
	p.backends.Range(func(k, _ any) bool {
		sum += procTicks(k.(int), false)
		return true
	})
	return sum
}

// cpuPool is a pool of size connections on a new migrated database, whose
// backends pg reads when there is no postmaster to read.
func cpuPool(b *testing.B, size int32, pg *pgCPU) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(ledgertest.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = size, size
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pg.backends.Store(int(c.PgConn().PID()), struct{}{})
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func newPGCPU() *pgCPU {
	pid, _ := strconv.Atoi(os.Getenv("TOKEND_BENCH_PG_PID"))
	return &pgCPU{postmaster: pid}
}

// warmOps is how many operations cpuRun runs, untimed, before its window:
// each of the pool's connections prepares its statements and settles on
// their plans, and ANALYZE then gives the tables statistics (issue 43: a
// plan made on a table never analyzed is the plan of its first rows).
const warmOps = 300

// cpuRun runs op warmOps times, untimed, ANALYZEs pool's database, then
// runs op n times more over c goroutines (i from warmOps) and reports
// pg-us/op, go-us/op and ops/s of those.
func cpuRun(b *testing.B, pool *pgxpool.Pool, pg *pgCPU, n, c int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Value
	run := func(end int) {
		var wg sync.WaitGroup
		for range c {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= end {
						return
					}
					if err := op(i); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(warmOps)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	next.Store(warmOps)
	self := os.Getpid()
	pg0, go0, t0 := pg.read(), procTicks(self, false), time.Now()
	b.ResetTimer()
	run(warmOps + n)
	b.StopTimer()
	el, pg1, go1 := time.Since(t0), pg.read(), procTicks(self, false)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	us := func(d int64) float64 { return float64(d) * 1e6 / ticks / float64(n) }
	b.ReportMetric(us(pg1-pg0), "pg-us/op")
	b.ReportMetric(us(go1-go0), "go-us/op")
	b.ReportMetric(float64(n)/el.Seconds(), "ops/s")
}

// issueN issues n tokens of op with 8 goroutines on pool (untimed setup).
func issueN(b *testing.B, pool *pgxpool.Pool, issuer *intent.Issuer, op string, n int, payload func(k int) []byte) []consume.Request {
	b.Helper()
	reqs := make([]consume.Request, n)
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				p := payload(k)
				subject := "user-" + strconv.Itoa(k%1000)
				out, err := issuer.Issue(context.Background(), pool, intent.Request{
					Tenant: tenant, Operation: op, IntentID: "cpu-" + run + "-" + strconv.Itoa(k),
					Subject: subject, TTLSeconds: 3600, Payload: p, Actor: "bench",
				})
				if err != nil {
					failed.Store(err)
					return
				}
				reqs[k] = consume.Request{Tenant: tenant, Secret: out.Secret, Operation: op, Subject: subject, Payload: p, Actor: "bench"}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("issue: %v", err)
	}
	return reqs
}

func benchConcurrency(def int) int {
	if c, err := strconv.Atoi(os.Getenv("TOKEND_BENCH_C")); err == nil && c > 0 {
		return c
	}
	return def
}

// BenchmarkCPULeasePair: a lease grant (Spend of a lease-mode token) and the
// holder's complete (Finish), b.N pairs over TOKEND_BENCH_C goroutines
// (default 8) on a pool of as many connections.
func BenchmarkCPULeasePair(b *testing.B) {
	pg := newPGCPU()
	c := benchConcurrency(8)
	pool := cpuPool(b, int32(c), pg)
	sb := newSpendBenchOn(b, pool)
	ctx := context.Background()
	if _, err := operation.Put(ctx, pool, tenant, operation.Policy{Name: payOp, Mode: operation.Lease, OnLeaseExpiry: operation.OnExpiryUnknown, LeaseSeconds: 60}, nil); err != nil {
		b.Fatal(err)
	}
	reqs := issueN(b, pool, sb.issuer, payOp, warmOps+b.N, func(int) []byte { return []byte(`{"amount":1}`) })
	cpuRun(b, pool, pg, b.N, c, func(i int) error {
		resp, err := sb.spender.Spend(ctx, pool, reqs[i])
		if err != nil || resp.Lease == nil {
			return fmt.Errorf("grant: %v (%d)", err, resp.Status)
		}
		rec, err := consume.Finish(ctx, pool, token.Complete, consume.Report{Tenant: tenant, TokenID: resp.TokenID,
			Generation: resp.Lease.Generation, Result: map[string]string{"capture": "c"}, Actor: "bench"})
		if err != nil || rec.State != token.Consumed {
			return fmt.Errorf("complete: %v (%s)", err, rec.State)
		}
		return nil
	})
}

// BenchmarkCPUSpend: atomic ledger.credit spends with Spender.Spend, b.N of
// them over TOKEND_BENCH_C goroutines (default 32) on pools of the sizes in
// TOKEND_BENCH_POOLS (default 4,8,16,32): the pool that gives group commit
// enough transactions in flight, against the Postgres CPU it costs.
func BenchmarkCPUSpend(b *testing.B) {
	c := benchConcurrency(32)
	sizes := []int32{4, 8, 16, 32}
	if s := os.Getenv("TOKEND_BENCH_POOLS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, int32(n))
		}
	}
	for _, size := range sizes {
		b.Run("pool="+strconv.Itoa(int(size)), func(b *testing.B) {
			pg := newPGCPU()
			pool := cpuPool(b, size, pg)
			sb := newSpendBenchOn(b, pool)
			ctx := context.Background()
			reqs := issueN(b, pool, sb.issuer, "ledger.credit", warmOps+b.N, func(k int) []byte {
				return []byte(`{"account":"acct-` + strconv.Itoa(k%1000) + `","amount":1}`)
			})
			cpuRun(b, pool, pg, b.N, c, func(i int) error {
				resp, err := sb.spender.Spend(ctx, pool, reqs[i])
				if err != nil || resp.Status != http.StatusOK {
					return fmt.Errorf("spend: %v (%d)", err, resp.Status)
				}
				return nil
			})
		})
	}
}
