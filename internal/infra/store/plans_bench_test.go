package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
)

// BenchmarkIssueOnAFreshDatabase (issue 43): issues through store.Issue on
// a new database whose tables were never analyzed, as a fresh deployment's
// first minutes have them (autovacuum is off for tokens and token_events,
// so that its first ANALYZE, 80-90 s in on the issue's machine, does not
// land in a window), and reports per window Postgres' CPU and the buffers
// hit or read per issue. Run it once (-benchtime 1x): the windows are its
// own, ending at the cumulative counts of TOKEND_BENCH_WINDOWS (default
// 1000,5000,10000,20000), over TOKEND_BENCH_C goroutines (default 4) on a
// pool of as many connections. scripts/bench-cpu fresh pairs it against
// another revision's schema.
//
//	pg-us/issue@N  Postgres' CPU per issue in the window ending at N: the
//	               cluster of TOKEND_BENCH_PG_PID, else the pool's backends.
//	buf/issue@N    shared buffers hit or read per issue (pg_stat_database):
//	               a count, which the shared machine does not move.
func BenchmarkIssueOnAFreshDatabase(b *testing.B) {
	ends := []int{1000, 5000, 10000, 20000}
	if s := os.Getenv("TOKEND_BENCH_WINDOWS"); s != "" {
		ends = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			ends = append(ends, n)
		}
	}
	c := 4
	if s := os.Getenv("TOKEND_BENCH_C"); s != "" {
		var err error
		if c, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(ledgertest.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	var backends sync.Map
	cfg.MaxConns, cfg.MinConns = int32(c), int32(c)
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		backends.Store(int(conn.PgConn().PID()), struct{}{})
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, sql := range []string{
		`ALTER TABLE tokens SET (autovacuum_enabled = false)`,
		`ALTER TABLE token_events SET (autovacuum_enabled = false)`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			b.Fatal(err)
		}
	}
	postmaster, _ := strconv.Atoi(os.Getenv("TOKEND_BENCH_PG_PID"))
	pgTicks := func() int64 {
		if postmaster != 0 {
			return clusterTicks(postmaster)
		}
		var sum int64
		backends.Range(func(k, _ any) bool {
			sum += procTicks(k.(int), false)
			return true
		})
		return sum
	}
	buffers := func() int64 {
		// Backends send their counts when idle, at most once a second.
		time.Sleep(1500 * time.Millisecond)
		var n int64
		if err := pool.QueryRow(ctx, `SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var next atomic.Int64
	b.ResetTimer()
	start := 0
	for _, end := range ends {
		buf0 := buffers()
		pg0 := pgTicks()
		var wg sync.WaitGroup
		var failed atomic.Value
		for range c {
			wg.Go(func() {
				for {
					k := int(next.Add(1))
					if k > end {
						next.Add(-1)
						return
					}
					id := fmt.Sprintf("tok_%s_%08d", run, k)
					_, err := store.Issue(ctx, pool, store.IssueParams{
						Tenant: "t", ID: id, Operation: "ledger.credit", IntentID: id, Subject: "user-" + strconv.Itoa(k%1000),
						SecretHash: []byte(id), Nonce: []byte{0}, KeyID: "k1", Fingerprint: []byte{0},
						TTLSeconds: 3600, RetentionSeconds: 86400, Actor: "bench",
						Mode: "atomic", OnLeaseExpiry: "unknown", LeaseSeconds: 30, IgnoredFields: []string{},
					})
					if err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		pg1 := pgTicks()
		buf1 := buffers()
		n := float64(end - start)
		b.ReportMetric(float64(pg1-pg0)*1e6/100/n, "pg-us/issue@"+strconv.Itoa(end))
		b.ReportMetric(float64(buf1-buf0)/n, "buf/issue@"+strconv.Itoa(end))
		start = end
	}
}

// procTicks returns utime+stime of pid, and with children cutime+cstime as
// well (the CPU of the children it has waited for), in /proc's clock ticks
// (USER_HZ, 100 on every Linux build).
func procTicks(pid int, children bool) int64 {
	f := procStat(pid)
	if f == nil {
		return 0
	}
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

// procStat is /proc/pid/stat's fields from the third (the state) on.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// clusterTicks is the CPU of the cluster whose postmaster is pm: its own
// and its reaped children's, and its live children's.
func clusterTicks(pm int) int64 {
	sum := procTicks(pm, true)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := procStat(pid); f != nil && f[1] == strconv.Itoa(pm) { // field 4, the parent
			sum += procTicks(pid, false)
		}
	}
	return sum
}
