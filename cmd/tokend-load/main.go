// Command tokend-load measures tokend over HTTP next to what Postgres itself
// can do on the same machine, in the same run: the limit.
//
// For each operation (issue, spend, lookup), each concurrency and each
// repeat it first runs pgbench with the operation's reference script from
// bench/ on tokend's own schema (the limit), then drives tokend with as many
// concurrent HTTP/1.1 keep-alive workers (the service), so every service
// figure has a limit figure measured seconds before it. Lookups are measured
// three ways: tokend, tokend+redis, and a no-lookup ceiling (a GET tokend
// answers 404 before any read: what HTTP, routing and authentication alone
// allow). It then measures
// spends again with a large table (growth), and writes a table
// (results.txt, also printed), results.json and a plot (bench.png,
// bench.svg) to -out.
//
// scripts/bench sets everything up (Postgres, a fresh tokend_bench database,
// tokend with and without Redis, an API key) and runs this command; run it
// directly only against a database you can throw away: it truncates tables.
//
// Usage:
//
//	tokend-load -db URL [-url URL -key KEY] [flags]
//	tokend-load -report results.json [-out DIR]
//	tokend-load cpu -url URL -key KEY -pid PID -pg-pid PM [flags]
//	tokend-load soak -url URL -key KEY -operator-key KEY [-db URL -pid PID -pg-pid PM] [flags]
//	tokend-load soak -report soak.json
//
// The cpu subcommand is the load side of scripts/bench-cpu http: fixed
// windows of issues, spends and cached GETs, each with the CPU tokend and
// Postgres spent on it per request (see cpuWindows).
//
// The soak subcommand (issue 43; scripts/soak sets up a fresh cluster and
// tokend for it, bench/results/soak.md has a recorded run) runs tokend as a
// deployment runs, for -duration: an open-loop mix at a fixed -rate (slots a
// second, each a request scheduled at its time, latency counted from it)
// of issues, replays of a recent Idempotency-Key, ledger.credit spends,
// lease + complete of a lease-mode operation it declares, GETs and
// operator revokes; a feed follower long-polling GET /v1/events; a local
// webhook receiver it registers (tokend needs
// TOKEND_WEBHOOK_ALLOWED_HOSTS=127.0.0.1); and short -ttl and -retention on
// the operations, so the sweeper expires and purges while it runs. Every
// -window it prints and records tokend's and Postgres' CPU per request
// (/proc, as cpu does), p50/p99 per request kind, feed and webhook lag,
// tokend's RSS and goroutines (/metrics), the bytes and rows of every table
// (-db), and errors per kind; at the end it judges the run against issue
// 43's marks (judgeSoak) and writes soak.json and soak.txt to -out.
//
// The flags are:
//
//	-db URL           the bench database (env TOKEND_BENCH_DATABASE_URL); its
//	                  tokens, token_events and ledger tables are truncated
//	-url URL          tokend without a cache; empty measures the limit only
//	-cached-url URL   tokend with TOKEND_REDIS_URL, for lookups; empty leaves
//	                  the cached column pending
//	-key KEY          a client API key of tokend (env TOKEND_LOAD_KEY)
//	-pid, -cached-pid process ids of the two tokend instances, for their
//	                  CPU time per request and peak RSS (/proc/PID)
//	-pprof-url URL    base URL of the -url tokend's debug listener (tokend
//	                  serve with TOKEND_DEBUG_LISTEN), for CPU profiles of
//	                  its spends and issues; empty: no profile
//	-redis URL        the Redis the cached instance uses, to check that it
//	                  really caches (keys appear after lookups)
//	-cache-note TEXT  why the cached column is pending, when the caller knows
//	-note TEXT        a line for the report's notes, e.g. how the caller set
//	                  tokend up (repeatable)
//	-c LIST           concurrencies (default 1,8,32,128)
//	-duration D       length of each timed run, whole seconds (default 3s)
//	-repeats N        repeats of every run; the report shows medians (default 3)
//	-ops LIST         operations to measure (default issue,spend,lookup)
//	-growth LIST      table sizes for the spend growth figure, "" for none
//	                  (default 10000,10000000)
//	-growth-c N       concurrency of the growth runs (default 32)
//	-rss-c N          concurrency whose spend runs record tokend's peak RSS
//	                  (default 32)
//	-accounts N       ledger accounts spends are spread over (default 1000)
//	-quick            -duration 2s -repeats 1 -growth 10000,1000000, unless
//	                  given explicitly
//	-headroom N       Postgres connections left to others: pgbench uses at
//	                  most the free connections less N (default 10)
//	-migrate          apply tokend's migrations to -db first (to run the
//	                  limit without a tokend)
//	-bench-dir DIR    the reference scripts (default bench)
//	-out DIR          where results go (default artifacts/bench)
//	-pgbench, -psql   the binaries (default: found on PATH)
//	-report FILE      redraw the table and plot of a results.json, run nothing
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config is what a bench run was asked to do; it is recorded in results.json.
type Config struct {
	URL             string   `json:"url,omitempty"`
	CachedURL       string   `json:"cached_url,omitempty"`
	PprofURL        string   `json:"pprof_url,omitempty"`
	Concurrency     []int    `json:"concurrency"`
	DurationSeconds int      `json:"duration_s"`
	Repeats         int      `json:"repeats"`
	Ops             []string `json:"ops"`
	GrowthRows      []int64  `json:"growth_rows"`
	GrowthC         int      `json:"growth_c"`
	RSSC            int      `json:"rss_c"`
	Accounts        int      `json:"accounts"`
	Quick           bool     `json:"quick"`
	Headroom        int      `json:"headroom"`

	key       string
	db        string
	pid       int
	cachedPID int
	redis     string
	cacheNote string
	notes     []string
	migrate   bool
	benchDir  string
	out       string
	pgbench   string
	psql      string
	report    string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "cpu" {
		if err := cpuWindows(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "tokend-load:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "soak" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := soakCmd(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			fmt.Fprintln(os.Stderr, "tokend-load:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tokend-load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tokend-load:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var (
		cfg                     Config
		conc, ops, growth       string
		duration                time.Duration
		quickDur                = 2 * time.Second
		quickRepeats            = 1
		quickGrowth             = "10000,1000000"
		defaultGrowth           = "10000,10000000"
		defaultDuration         = 3 * time.Second
		defaultRepeats          = 3
		defaultConcurrency      = "1,8,32,128"
		defaultOps              = "issue,spend,lookup"
		defaultAccounts         = 1000
		defaultGrowthC, defRSSC = 32, 32
	)
	fs := flag.NewFlagSet("tokend-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: tokend-load -db URL [-url URL -key KEY] [flags]\n       tokend-load -report results.json [-out DIR]\n"+
			"       tokend-load cpu -url URL -key KEY -pid PID -pg-pid PM [flags]\n"+
			"       tokend-load soak -url URL -key KEY -operator-key KEY [-db URL -pid PID -pg-pid PM] [flags] (tokend-load soak -h; scripts/soak)")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.db, "db", getenv("TOKEND_BENCH_DATABASE_URL"), "bench database URL, truncated by the run (env TOKEND_BENCH_DATABASE_URL)")
	fs.StringVar(&cfg.URL, "url", "", "tokend base URL without a cache; empty measures the limit only")
	fs.StringVar(&cfg.CachedURL, "cached-url", "", "tokend base URL with TOKEND_REDIS_URL; empty leaves the cached column pending")
	fs.StringVar(&cfg.key, "key", "", "client API key (env TOKEND_LOAD_KEY)")
	fs.IntVar(&cfg.pid, "pid", 0, "process id of the -url tokend, for CPU time and peak RSS")
	fs.IntVar(&cfg.cachedPID, "cached-pid", 0, "process id of the -cached-url tokend")
	fs.StringVar(&cfg.PprofURL, "pprof-url", "", "base URL of the -url tokend's debug listener (TOKEND_DEBUG_LISTEN), for CPU profiles; empty: none")
	fs.StringVar(&cfg.redis, "redis", "", "Redis URL the cached tokend uses, to check that it caches")
	fs.StringVar(&cfg.cacheNote, "cache-note", "", "why the cached column is pending, when the caller knows")
	fs.Func("note", "a line for the report's notes, e.g. how tokend was set up (repeatable)", func(s string) error {
		cfg.notes = append(cfg.notes, s)
		return nil
	})
	fs.StringVar(&conc, "c", defaultConcurrency, "comma-separated concurrencies")
	fs.DurationVar(&duration, "duration", defaultDuration, "length of each timed run, whole seconds")
	fs.IntVar(&cfg.Repeats, "repeats", defaultRepeats, "repeats of every run; medians are reported")
	fs.StringVar(&ops, "ops", defaultOps, "comma-separated operations: issue, spend, lookup")
	fs.StringVar(&growth, "growth", defaultGrowth, `table sizes for the spend growth figure, "" for none`)
	fs.IntVar(&cfg.GrowthC, "growth-c", defaultGrowthC, "concurrency of the growth runs")
	fs.IntVar(&cfg.RSSC, "rss-c", defRSSC, "concurrency whose spend runs record tokend's peak RSS")
	fs.IntVar(&cfg.Accounts, "accounts", defaultAccounts, "ledger accounts spends are spread over")
	fs.BoolVar(&cfg.Quick, "quick", false, fmt.Sprintf("-duration %s -repeats %d -growth %s unless given", quickDur, quickRepeats, quickGrowth))
	fs.IntVar(&cfg.Headroom, "headroom", 10, "Postgres connections left to others")
	fs.BoolVar(&cfg.migrate, "migrate", false, "apply tokend's migrations to -db first")
	fs.StringVar(&cfg.benchDir, "bench-dir", "bench", "directory of the reference scripts")
	fs.StringVar(&cfg.out, "out", "artifacts/bench", "output directory")
	fs.StringVar(&cfg.pgbench, "pgbench", "", "pgbench binary (default: on PATH)")
	fs.StringVar(&cfg.psql, "psql", "", "psql binary (default: on PATH)")
	fs.StringVar(&cfg.report, "report", "", "redraw the table and plot of this results.json and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.report != "" {
		return cfg, nil
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Quick {
		if !set["duration"] {
			duration = quickDur
		}
		if !set["repeats"] {
			cfg.Repeats = quickRepeats
		}
		if !set["growth"] {
			growth = quickGrowth
		}
	}
	if cfg.key == "" {
		cfg.key = getenv("TOKEND_LOAD_KEY")
	}

	var err error
	if cfg.Concurrency, err = parseInts(conc); err != nil || len(cfg.Concurrency) == 0 {
		return cfg, fmt.Errorf("-c %q: want positive integers", conc)
	}
	if cfg.GrowthRows, err = parseInt64s(growth); err != nil {
		return cfg, fmt.Errorf("-growth %q: want positive integers", growth)
	}
	slices.Sort(cfg.GrowthRows)
	cfg.GrowthRows = slices.Compact(cfg.GrowthRows)
	for o := range strings.SplitSeq(ops, ",") {
		o = strings.TrimSpace(o)
		switch o {
		case opIssue, opSpend, opLookup:
			if !slices.Contains(cfg.Ops, o) {
				cfg.Ops = append(cfg.Ops, o)
			}
		case "":
		default:
			return cfg, fmt.Errorf("-ops: unknown operation %q", o)
		}
	}
	slices.SortFunc(cfg.Ops, func(a, b string) int { return opRank(a) - opRank(b) })
	if duration < time.Second || duration%time.Second != 0 {
		return cfg, fmt.Errorf("-duration %s: want whole seconds (pgbench -T counts seconds)", duration)
	}
	cfg.DurationSeconds = int(duration / time.Second)
	switch {
	case cfg.db == "":
		return cfg, errors.New("-db (or TOKEND_BENCH_DATABASE_URL) is required")
	case cfg.Repeats < 1:
		return cfg, errors.New("-repeats must be at least 1")
	case cfg.GrowthC < 1 || cfg.RSSC < 1 || cfg.Accounts < 1 || cfg.Headroom < 0:
		return cfg, errors.New("-growth-c, -rss-c and -accounts must be positive, -headroom not negative")
	case (cfg.URL != "" || cfg.CachedURL != "") && cfg.key == "":
		return cfg, errors.New("-key (or TOKEND_LOAD_KEY) is required with -url or -cached-url")
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	cfg.CachedURL = strings.TrimRight(cfg.CachedURL, "/")
	cfg.PprofURL = strings.TrimRight(cfg.PprofURL, "/")
	for _, b := range []struct {
		path *string
		name string
	}{{&cfg.pgbench, "pgbench"}, {&cfg.psql, "psql"}} {
		if *b.path == "" {
			p, err := exec.LookPath(b.name)
			if err != nil {
				return cfg, fmt.Errorf("%s not found on PATH (or give -%s)", b.name, b.name)
			}
			*b.path = p
		}
	}
	return cfg, nil
}

func parseInts(s string) ([]int, error) {
	xs, err := parseInt64s(s)
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out, err
}

func parseInt64s(s string) ([]int64, error) {
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runID makes this run's intent ids unique on a reused database.
func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
