package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleResults() *Results {
	var runs []Run
	for _, c := range []int{1, 8, 32} {
		for rep := 1; rep <= 3; rep++ {
			f := float64(c * rep)
			for _, op := range []string{opIssue, opSpend, opLookup} {
				runs = append(runs,
					Run{Phase: phaseMatrix, Op: op, Side: sideLimit, C: c, Clients: c, Repeat: rep, TPS: 1000 * f, P50: 1, P99: 2, MachinePerOp: 300},
					Run{Phase: phaseMatrix, Op: op, Side: sideTokend, C: c, Clients: c, Repeat: rep, TPS: 500 * f, P50: 2, P99: 4, CPUPerOp: 100, MachinePerOp: 600})
				if op == opLookup {
					runs = append(runs,
						Run{Phase: phaseMatrix, Op: op, Side: sideCached, C: c, Clients: c, Repeat: rep, TPS: 2000 * f, P50: 0.5, P99: 1},
						Run{Phase: phaseMatrix, Op: op, Side: sideCeiling, C: c, Clients: c, Repeat: rep, TPS: 1000 * f, P50: 0.7, P99: 1.5, CPUPerOp: 50})
				}
			}
		}
	}
	for _, g := range []struct {
		rows int64
		tps  float64
	}{{10_000, 900}, {10_000_000, 720}} {
		runs = append(runs,
			Run{Phase: phaseGrowth, Op: opSpend, Side: sideLimit, TableRows: g.rows, C: 32, Clients: 32, Repeat: 1, TPS: g.tps, P50: 3, P99: 9, RowsAtStart: g.rows + 5000},
			Run{Phase: phaseGrowth, Op: opSpend, Side: sideTokend, TableRows: g.rows, C: 32, Clients: 32, Repeat: 1, TPS: g.tps / 2, P50: 6, P99: 20, RowsAtStart: g.rows + 7000})
	}
	return &Results{
		Started: time.Unix(0, 0).UTC(), Finished: time.Unix(60, 0).UTC(),
		Server: serverInfo{Version: "15.20", Database: "tokend_bench", Fsync: "on", SynchronousCommit: "on", FullPageWrites: "on", SharedBuffers: "128MB", MaxConnections: 100},
		Config: Config{Concurrency: []int{1, 8, 32}, DurationSeconds: 3, Repeats: 3},
		CPUs:   2, Runs: runs, Summary: summarize(runs),
		RSS:          &RSS{PID: 1, Op: opSpend, C: 32, HWMKB: 40960, Reset: true},
		Cache:        "measured",
		LookupRatios: lookupRatios(runs), GrowthRatio: growthRatio(summarize(runs)),
		Notes: []string{"tokend's pool: pool_max_conns=32"},
	}
}

func TestSummarizePairsRuns(t *testing.T) {
	res := sampleResults()
	var found int
	for _, r := range res.Summary {
		if r.Repeats == 0 {
			t.Fatalf("row without runs: %+v", r)
		}
		switch {
		case r.Phase == phaseMatrix && r.Side == sideTokend:
			found++
			if r.Ratio != 0.5 {
				t.Errorf("%s C=%d: ratio %v, want 0.5", r.Op, r.C, r.Ratio)
			}
			if want := 1000.0 * float64(r.C) * 2; r.LimitTPS != want || r.TPS != want/2 {
				t.Errorf("%s C=%d: tps %v limit %v, want medians %v and %v", r.Op, r.C, r.TPS, r.LimitTPS, want/2, want)
			}
		case r.Side == sideCached && r.Ratio != 2:
			t.Errorf("cached C=%d: ratio %v, want 2", r.C, r.Ratio)
		case r.Side == sideCeiling && (r.Op != opLookup || r.Ratio != 1 || r.CPUPerOp != 50):
			t.Errorf("ceiling row %+v, want a lookup with ratio 1 to the limit", r)
		case r.Side == sideLimit && r.Ratio != 0:
			t.Errorf("a limit row has a ratio: %+v", r)
		case r.Phase == phaseGrowth && r.Side == sideTokend && (r.Ratio != 0.5 || r.RowsAtStart != r.TableRows+7000):
			t.Errorf("growth row %+v, want ratio 0.5", r)
		}
	}
	if found != 9 {
		t.Fatalf("found %d tokend matrix rows, want 9", found)
	}
	first, last := res.Summary[0], res.Summary[len(res.Summary)-1]
	if first.Op != opIssue || first.C != 1 || first.Side != sideLimit || last.Phase != phaseGrowth || last.TableRows != 10_000_000 {
		t.Errorf("rows out of order: first %+v last %+v", first, last)
	}
	// Lookups of one concurrency: limit, tokend, tokend+redis, ceiling.
	var sides []string
	for _, r := range res.Summary {
		if r.Phase == phaseMatrix && r.Op == opLookup && r.C == 8 {
			sides = append(sides, r.Side)
		}
	}
	if want := []string{sideLimit, sideTokend, sideCached, sideCeiling}; !slices.Equal(sides, want) {
		t.Errorf("lookup rows at C=8: %v, want %v", sides, want)
	}
}

func TestLookupRatios(t *testing.T) {
	lookup := func(side string, c, rep int, tps float64) Run {
		return Run{Phase: phaseMatrix, Op: opLookup, Side: side, C: c, Clients: c, Repeat: rep, TPS: tps}
	}
	runs := []Run{
		// C=8: per-repeat ratios 1.0, 1.5 and 3.0, median 1.5, while the
		// ratio of the median tps would be 300/100 = 3.
		lookup(sideTokend, 8, 1, 100), lookup(sideCached, 8, 1, 100), lookup(sideCeiling, 8, 1, 200),
		lookup(sideTokend, 8, 2, 10), lookup(sideCached, 8, 2, 15), lookup(sideCeiling, 8, 2, 19),
		lookup(sideTokend, 8, 3, 1000), lookup(sideCached, 8, 3, 3000), lookup(sideCeiling, 8, 3, 2100),
		// C=1: no cached run; C=32: a ceiling run without its uncached pair.
		lookup(sideTokend, 1, 1, 50), lookup(sideCeiling, 1, 1, 100),
		lookup(sideCeiling, 32, 1, 100),
		// Other phases and operations do not count.
		{Phase: phaseMatrix, Op: opSpend, Side: sideTokend, C: 1, Repeat: 1, TPS: 1},
		{Phase: phaseMatrix, Op: opLookup, Side: sideLimit, C: 1, Repeat: 1, TPS: 1},
	}
	got := lookupRatios(runs)
	want := []LookupRatio{{C: 1, Ceiling: 2}, {C: 8, Cached: 1.5, Ceiling: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("lookupRatios = %+v, want %+v", got, want)
	}
	line := lookupRatioLine(got, "measured")
	for _, w := range []string{"lookup: cached/uncached - 1.50 (C=1,8)", "no-lookup ceiling/uncached 2.00 2.00 (C=1,8)", "≥ 3"} {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %q", line, w)
		}
	}
	if strings.Contains(line, "pending") || !strings.Contains(lookupRatioLine(got, "pending: no Redis"), "cache pending") {
		t.Errorf("a pending cache must be flagged, and only then: %q", line)
	}
	if lookupRatios(runs[:1]) != nil || lookupRatioLine(nil, "") != "" {
		t.Errorf("no pairs, no line")
	}
}

func TestGrowthRatio(t *testing.T) {
	g := growthRatio(sampleResults().Summary)
	if g == nil || g.SmallRows != 10_000 || g.LargeRows != 10_000_000 || g.Tokend != 0.8 || g.Limit != 0.8 {
		t.Fatalf("growthRatio = %+v, want 10^7/10^4 of 0.8 for both", g)
	}
	if line := growthRatioLine(g); line != "growth: spend tps @10^7 / @10^4 stored tokens: tokend 0.80 (issue 7 asks ≥ 0.8), limit 0.80 (medians)" {
		t.Errorf("line %q", line)
	}
	one := []Row{{Phase: phaseGrowth, Op: opSpend, Side: sideTokend, TableRows: 10_000, TPS: 1}}
	if growthRatio(one) != nil || growthRatioLine(nil) != "" {
		t.Errorf("one table size gives no ratio")
	}
	noLimit := append(one, Row{Phase: phaseGrowth, Op: opSpend, Side: sideTokend, TableRows: 20_000, TPS: 0.5})
	if line := growthRatioLine(growthRatio(noLimit)); !strings.Contains(line, "tokend 0.50") || !strings.Contains(line, "limit -") {
		t.Errorf("line %q", line)
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	res := sampleResults()
	paths, err := writeFiles(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"results.json", "results.txt", "bench.png", "bench.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(paths) != 4 {
		t.Errorf("paths %v", paths)
	}
	f, err := os.Open(filepath.Join(dir, "bench.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("bench.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 600 {
		t.Errorf("bench.png is %v", b)
	}

	back, err := readResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != len(res.Runs) || len(back.Summary) != len(res.Summary) || back.RSS.HWMKB != 40960 ||
		!slices.Equal(back.LookupRatios, res.LookupRatios) || *back.GrowthRatio != *res.GrowthRatio {
		t.Fatalf("results.json does not round-trip")
	}

	txt, _ := os.ReadFile(filepath.Join(dir, "results.txt"))
	for _, want := range []string{"spend limit (pgbench)", "lookup tokend+redis", "lookup tokend, no lookup (ceiling)", "0.50", "fsync=on", "40.0 MiB", "10^7",
		"lookup: cached/uncached 4.00 4.00 4.00 (C=1,8,32); no-lookup ceiling/uncached 2.00 2.00 2.00 (C=1,8,32)",
		"growth: spend tps @10^7 / @10^4 stored tokens: tokend 0.80",
		"machine µs/op",
		"note: tokend's pool: pool_max_conns=32",
		"machine CPU per spend at C=32: limit (C=32) 300 µs, tokend 600 µs, of which tokend's own 100: a CPU-bound ratio of at most 0.50, 0.60 if tokend used no CPU",
		"machine CPU per issue at C=8: limit (C=8) 300 µs"} {
		if !bytes.Contains(txt, []byte(want)) {
			t.Errorf("results.txt lacks %q:\n%s", want, txt)
		}
	}
}

func TestWriteFilesEmpty(t *testing.T) {
	if _, err := writeFiles(t.TempDir(), &Results{}); err != nil {
		t.Fatalf("an empty run should still render: %v", err)
	}
}

func TestHumanCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 10: "10", 1000: "10^3", 10_000_000: "10^7", 25_000: "25k", 2_500_000: "2.5M"} {
		if got := humanCount(n); got != want {
			t.Errorf("humanCount(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"TOKEND_BENCH_DATABASE_URL": "postgres://x/y", "TOKEND_LOAD_KEY": "k"}[k]
	}
	var stderr strings.Builder
	cfg, err := parseFlags([]string{"-quick", "-pgbench", "/bin/true", "-psql", "/bin/true", "-url", "http://h/", "-pprof-url", "http://h:6060/"}, env, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DurationSeconds != 2 || cfg.Repeats != 1 || len(cfg.GrowthRows) != 2 || cfg.GrowthRows[1] != 1_000_000 ||
		cfg.key != "k" || cfg.db != "postgres://x/y" || cfg.URL != "http://h" || cfg.PprofURL != "http://h:6060" || len(cfg.Ops) != 3 {
		t.Fatalf("quick config: %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-quick", "-repeats", "2", "-growth", "", "-ops", "spend,issue", "-pgbench", "/bin/true", "-psql", "/bin/true",
		"-note", "pool_max_conns=32", "-note", "second"}, env, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Repeats != 2 || len(cfg.GrowthRows) != 0 || strings.Join(cfg.Ops, ",") != "issue,spend" || strings.Join(cfg.notes, "|") != "pool_max_conns=32|second" {
		t.Fatalf("explicit flags must win over -quick: %+v", cfg)
	}
	for _, bad := range [][]string{
		{"-duration", "1500ms"},
		{"-c", "0"},
		{"-ops", "delete"},
		{"-url", "http://h", "-key", ""},
	} {
		noKey := func(k string) string {
			if k == "TOKEND_LOAD_KEY" {
				return ""
			}
			return env(k)
		}
		if _, err := parseFlags(append(bad, "-pgbench", "/bin/true", "-psql", "/bin/true"), noKey, &stderr); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestSummarizePairsWithTheBestLimitUpToC: when Postgres gets less through
// with more connections, a service row is measured against the best limit
// of its repeat at a concurrency up to its own, never a higher one.
func TestSummarizePairsWithTheBestLimitUpToC(t *testing.T) {
	limit := map[int]float64{1: 1000, 8: 3000, 32: 1800, 128: 4000}
	var runs []Run
	for _, c := range []int{1, 8, 32} {
		runs = append(runs,
			Run{Phase: phaseMatrix, Op: opSpend, Side: sideLimit, C: c, Clients: c, Repeat: 1, TPS: limit[c]},
			Run{Phase: phaseMatrix, Op: opSpend, Side: sideTokend, C: c, Clients: c, Repeat: 1, TPS: 1500})
	}
	// Another operation's and another repeat's limits are not candidates.
	runs = append(runs,
		Run{Phase: phaseMatrix, Op: opIssue, Side: sideLimit, C: 8, Clients: 8, Repeat: 1, TPS: 9000},
		Run{Phase: phaseMatrix, Op: opSpend, Side: sideLimit, C: 8, Clients: 8, Repeat: 2, TPS: 9000},
		Run{Phase: phaseMatrix, Op: opSpend, Side: sideLimit, C: 128, Clients: 68, Repeat: 1, TPS: limit[128]})
	want := map[int]struct {
		ratio  float64
		limitC int
	}{1: {1.5, 1}, 8: {0.5, 8}, 32: {0.5, 8}}
	for _, r := range summarize(runs) {
		if r.Side != sideTokend {
			continue
		}
		if w := want[r.C]; r.Ratio != w.ratio || r.LimitC != w.limitC {
			t.Errorf("C=%d: ratio %v against the limit at C=%d, want %v at C=%d", r.C, r.Ratio, r.LimitC, w.ratio, w.limitC)
		}
	}
}
