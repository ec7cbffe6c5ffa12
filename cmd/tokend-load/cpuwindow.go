package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// cpuWindows is the "cpu" subcommand, the load side of scripts/bench-cpu
// http (issue 33):
//
//	tokend-load cpu -url URL -key KEY -pid PID -pg-pid PM [-cached-url URL -cached-pid PID] [-n N] [-c C] [-gets N]
//
// It runs three windows one after the other, each a fixed number of
// requests over C keep-alive connections: N issues and then N spends of the
// tokens just issued on -url, then (with -cached-url) one untimed GET of
// every issued token to fill the cache and -gets timed GETs of them. Around
// each window it reads from /proc the CPU of the tokend serving it (-pid or
// -cached-pid), of the whole Postgres cluster (the postmaster -pg-pid, the
// children it has reaped, and its live children) and of itself, and prints
// one line a window:
//
//	op tokend-us/op pg-us/op load-us/op ops/s errors
//
// The CPU figures are what the pinned procedure compares; the rate depends
// on how the shared cores were split and is printed for reference only.
func cpuWindows(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokend-load cpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url, cachedURL, key   string
		pid, cachedPID, pgPID int
		n, c, gets, accounts  int
		run                   string
	)
	fs.StringVar(&url, "url", "", "tokend base URL for issues and spends")
	fs.StringVar(&cachedURL, "cached-url", "", "tokend (with TOKEND_REDIS_URL) base URL for cached GETs; empty: no GET window")
	fs.StringVar(&key, "key", os.Getenv("TOKEND_LOAD_KEY"), "client API key (env TOKEND_LOAD_KEY)")
	fs.IntVar(&pid, "pid", 0, "process id of the -url tokend")
	fs.IntVar(&cachedPID, "cached-pid", 0, "process id of the -cached-url tokend")
	fs.IntVar(&pgPID, "pg-pid", 0, "process id of Postgres' postmaster")
	fs.IntVar(&n, "n", 2000, "issues, and spends, a window")
	fs.IntVar(&c, "c", 8, "concurrent connections")
	fs.IntVar(&gets, "gets", 10000, "cached GETs a window")
	fs.IntVar(&accounts, "accounts", 1000, "ledger accounts spends are spread over")
	fs.StringVar(&run, "run", strconv.FormatInt(time.Now().UnixNano(), 36), "makes idempotency keys unique across runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if url == "" || key == "" || pid == 0 || pgPID == 0 || n < 1 || c < 1 {
		return errors.New("cpu: -url, -key, -pid, -pg-pid and positive -n, -c are required")
	}
	ctx := context.Background()
	tgt := target{base: strings.TrimRight(url, "/"), key: key}
	pool := newTokenPool(run, accounts)
	window := func(op string, tpid int, run func() loadResult) error {
		t0, p0, s0 := procTicks(tpid, false), pgTicks(pgPID), procTicks(os.Getpid(), false)
		r := run()
		t1, p1, s1 := procTicks(tpid, false), pgTicks(pgPID), procTicks(os.Getpid(), false)
		if r.OK == 0 {
			return fmt.Errorf("cpu: %s: no request succeeded: %s", op, r.FirstErr)
		}
		us := func(d int64) float64 { return float64(d) * 1e6 / ticksPerSecond / float64(r.OK) }
		fmt.Fprintf(stdout, "%s %.1f %.1f %.1f %.1f %d\n", op, us(t1-t0), us(p1-p0), us(s1-s0), r.TPS(), r.Errors)
		if r.Errors > 0 {
			fmt.Fprintf(stderr, "cpu: %s: %d errors, e.g. %s\n", op, r.Errors, r.FirstErr)
		}
		return nil
	}
	if err := window("issue", pid, func() loadResult {
		return runLoad(ctx, tgt, c, time.Hour, issueRequest(tgt, pool, int64(n)))
	}); err != nil {
		return err
	}
	ids := pool.lookupIDs()
	if err := window("spend", pid, func() loadResult {
		return runLoad(ctx, tgt, c, time.Hour, spendRequest(tgt, pool))
	}); err != nil {
		return err
	}
	if cachedURL == "" || cachedPID == 0 || gets < 1 {
		return nil
	}
	ctgt := target{base: strings.TrimRight(cachedURL, "/"), key: key}
	if r := getAll(ctx, ctgt, c, ids); r.Errors > 0 {
		return fmt.Errorf("cpu: warming the cache: %d errors, e.g. %s", r.Errors, r.FirstErr)
	}
	var left atomic.Int64
	left.Store(int64(gets))
	return window("get", cachedPID, func() loadResult {
		return runLoad(ctx, ctgt, c, time.Hour, func(a *api, rng *rand.Rand) error {
			if left.Add(-1) < 0 {
				return errExhausted
			}
			return getToken(a, ids[rng.IntN(len(ids))])
		})
	})
}

// ticksPerSecond is /proc's clock tick, USER_HZ: 100 on every Linux build.
const ticksPerSecond = 100

// procTicks returns utime+stime of pid, with cutime+cstime (the CPU of the
// children it has waited for) when children is set; 0 when unreadable.
func procTicks(pid int, children bool) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3, the state
	k := 2
	if children {
		k = 4
	}
	if len(f) < 11+k {
		return 0
	}
	var sum int64
	for _, x := range f[11 : 11+k] { // fields 14-17: utime stime cutime cstime
		v, _ := strconv.ParseInt(x, 10, 64)
		sum += v
	}
	return sum
}

// pgTicks returns the CPU of the Postgres cluster whose postmaster is pm:
// its own, its reaped children's, and its live children's (the backends,
// the checkpointer, the WAL writer, autovacuum), as scripts/bench-cpu and
// consume's CPU benchmarks count it.
func pgTicks(pm int) int64 {
	sum := procTicks(pm, true)
	ents, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(pm)
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
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 > len(s) {
			continue
		}
		if f := strings.Fields(s[i+2:]); len(f) > 1 && f[1] == parent { // field 4, the parent
			sum += procTicks(pid, false)
		}
	}
	return sum
}
