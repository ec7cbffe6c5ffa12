package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Sides of a comparison.
const (
	sideLimit  = "limit"        // pgbench with a reference script of bench/
	sideTokend = "tokend"       // tokend over HTTP, no cache
	sideCached = "tokend+redis" // tokend over HTTP with TOKEND_REDIS_URL
	// sideCeiling is lookups of an id tokend refuses before any read
	// (ceilingRequest) on the uncached tokend: what a GET costs with no
	// lookup at all, the most a cache could give.
	sideCeiling = "tokend, no lookup"
)

// Operations compared.
const (
	opIssue  = "issue"  // POST /v1/tokens vs bench/issue.sql
	opSpend  = "spend"  // POST /v1/tokens/consume (ledger.credit) vs bench/spend.sql
	opLookup = "lookup" // GET /v1/tokens/{id} vs bench/lookup.sql
)

// Phases of a bench run.
const (
	phaseMatrix = "matrix" // every operation at every concurrency
	phaseGrowth = "growth" // spends with many stored tokens
)

// Run is one timed measurement.
type Run struct {
	Phase     string  `json:"phase"`
	Op        string  `json:"op"`
	Side      string  `json:"side"`
	TableRows int64   `json:"table_rows,omitempty"` // growth: rows in tokens when it started
	C         int     `json:"c"`                    // concurrency asked for
	Clients   int     `json:"clients"`              // pgbench connections, or HTTP workers
	Repeat    int     `json:"repeat"`
	TPS       float64 `json:"tps"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	OK        int64   `json:"ok"`
	Errors    int64   `json:"errors"`
	Elapsed   float64 `json:"elapsed_s"`
	// RowsAtStart is the size of tokens when a growth run started.
	RowsAtStart int64 `json:"rows_at_start,omitempty"`
	// CPUPerOp is tokend's CPU time (user+system) per answered request, in
	// microseconds: less noisy than tps on a shared machine.
	CPUPerOp float64 `json:"tokend_cpu_us_per_op,omitempty"`
	// MachinePerOp is the CPU time of the whole machine (Postgres, the
	// client, tokend, everything else) per answered request or
	// transaction, in microseconds. When the CPUs are what runs out, tps
	// is CPUs / MachinePerOp, so the limit's and tokend's MachinePerOp
	// bound the ratio between them.
	MachinePerOp float64 `json:"machine_cpu_us_per_op,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// Row summarises the repeats of one scenario: medians, and the ratio of the
// service to the same run's limit.
type Row struct {
	Phase     string  `json:"phase"`
	Op        string  `json:"op"`
	Side      string  `json:"side"`
	TableRows int64   `json:"table_rows,omitempty"`
	C         int     `json:"c"`
	Clients   int     `json:"clients"`
	Repeats   int     `json:"repeats"`
	TPS       float64 `json:"tps"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	Errors    int64   `json:"errors"`
	// Ratio is the median over repeats of this run's tps divided by the
	// limit's: the best pgbench run of the same operation and repeat at any
	// concurrency up to this one (bestLimit). Zero for limit rows and when no
	// pair exists.
	Ratio    float64 `json:"ratio,omitempty"`
	LimitTPS float64 `json:"limit_tps,omitempty"`
	// LimitC is the concurrency of the limit runs paired with this row's
	// (the highest, when repeats differ).
	LimitC int `json:"limit_c,omitempty"`
	// RowsAtStart is the median size of tokens when the growth runs started.
	RowsAtStart  int64   `json:"rows_at_start,omitempty"`
	CPUPerOp     float64 `json:"tokend_cpu_us_per_op,omitempty"`
	MachinePerOp float64 `json:"machine_cpu_us_per_op,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// RSS is tokend's memory under load.
type RSS struct {
	PID   int    `json:"pid"`
	Op    string `json:"op"`
	C     int    `json:"c"`
	HWMKB int64  `json:"vm_hwm_kb"` // peak resident set
	// Reset tells whether the peak was reset just before the load (writing 5
	// to /proc/PID/clear_refs); when false it is the peak since tokend started.
	Reset bool `json:"reset"`
}

// Results is everything a bench run wrote to results.json.
type Results struct {
	Started  time.Time  `json:"started"`
	Finished time.Time  `json:"finished"`
	Server   serverInfo `json:"server"`
	Config   Config     `json:"config"`
	CPUs     int        `json:"cpus"`
	Runs     []Run      `json:"runs"`
	Summary  []Row      `json:"summary"`
	RSS      *RSS       `json:"rss,omitempty"`
	// Cache says whether the tokend+redis figures measure a cache:
	// "measured", or why they are pending.
	Cache string `json:"cache"`
	// Profile says why no profile was taken; Profiles are those taken, as
	// "op: path (how to read it)" or "op: what went wrong".
	Profile  string   `json:"profile,omitempty"`
	Profiles []string `json:"profiles,omitempty"`
	// LookupRatios and GrowthRatio are the figures issue 7 sets targets
	// for, as the text report prints them.
	LookupRatios []LookupRatio `json:"lookup_ratios,omitempty"`
	GrowthRatio  *GrowthRatio  `json:"growth_ratio,omitempty"`
	Notes        []string      `json:"notes,omitempty"`
}

// LookupRatio compares the lookups of one concurrency with the uncached
// tokend's: each is the median over repeats of a side's tps divided by the
// uncached tps of the same repeat (measured seconds apart); 0 when no pair
// exists.
type LookupRatio struct {
	C int `json:"c"`
	// Cached is tokend+redis / tokend (issue 7 asks at least 3).
	Cached float64 `json:"cached_per_uncached,omitempty"`
	// Ceiling is the no-lookup ceiling / tokend: the most any cache could
	// reach on this machine.
	Ceiling float64 `json:"ceiling_per_uncached,omitempty"`
}

// GrowthRatio compares spends with the largest growth table to spends with
// the smallest: median tps at LargeRows / median tps at SmallRows.
type GrowthRatio struct {
	SmallRows int64   `json:"small_rows"`
	LargeRows int64   `json:"large_rows"`
	Tokend    float64 `json:"tokend,omitempty"` // issue 7 asks at least 0.8
	Limit     float64 `json:"limit,omitempty"`
}

// Targets of issue 7, printed next to the figures.
const (
	targetCachedPerUncached = 3.0
	targetGrowth            = 0.8
)

// summarize groups runs by scenario and computes medians and paired ratios.
func summarize(runs []Run) []Row {
	type key struct {
		phase, op, side string
		rows            int64
		c               int
	}
	type pairKey struct {
		phase, op string
		rows      int64
		c, repeat int
	}
	limits := map[pairKey]Run{}
	groups := map[key][]Run{}
	var order []key
	for _, r := range runs {
		if r.Side == sideLimit {
			limits[pairKey{r.Phase, r.Op, r.TableRows, r.C, r.Repeat}] = r
		}
		k := key{r.Phase, r.Op, r.Side, r.TableRows, r.C}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	rows := make([]Row, 0, len(order))
	for _, k := range order {
		g := groups[k]
		var tps, p50, p99, ratios, limitTPS, cpu, machine, rowsAt []float64
		row := Row{Phase: k.phase, Op: k.op, Side: k.side, TableRows: k.rows, C: k.c, Repeats: len(g)}
		var notes []string
		for _, r := range g {
			tps = append(tps, r.TPS)
			p50 = append(p50, r.P50)
			p99 = append(p99, r.P99)
			row.Errors += r.Errors
			row.Clients = max(row.Clients, r.Clients)
			if r.CPUPerOp > 0 {
				cpu = append(cpu, r.CPUPerOp)
			}
			if r.MachinePerOp > 0 {
				machine = append(machine, r.MachinePerOp)
			}
			if r.RowsAtStart > 0 {
				rowsAt = append(rowsAt, float64(r.RowsAtStart))
			}
			if r.Note != "" && !slices.Contains(notes, r.Note) {
				notes = append(notes, r.Note)
			}
			if r.Side == sideLimit {
				continue
			}
			if l, ok := bestLimit(limits, r); ok {
				ratios = append(ratios, r.TPS/l.TPS)
				limitTPS = append(limitTPS, l.TPS)
				row.LimitC = max(row.LimitC, l.C)
			}
		}
		row.TPS, row.P50, row.P99 = median(tps), median(p50), median(p99)
		row.Ratio, row.LimitTPS, row.CPUPerOp = median(ratios), median(limitTPS), median(cpu)
		row.MachinePerOp = median(machine)
		row.RowsAtStart = int64(median(rowsAt))
		row.Note = strings.Join(notes, "; ")
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		return cmp.Or(
			cmp.Compare(phaseRank(a.Phase), phaseRank(b.Phase)),
			cmp.Compare(opRank(a.Op), opRank(b.Op)),
			cmp.Compare(a.TableRows, b.TableRows),
			cmp.Compare(a.C, b.C),
			cmp.Compare(sideRank(a.Side), sideRank(b.Side)),
		)
	})
	return rows
}

// bestLimit is the limit r is measured against: of the pgbench runs of r's
// phase, operation, table size and repeat at a concurrency up to r's, the
// one with the highest tps. Postgres serves C clients best with at most C
// connections, not always with C: on two cores, 32 backends get fewer
// spends through than 8 (they queue on the WAL write lock and on buffer
// locks), and a pooler, tokend's own among them, would not open 32. So the
// limit at C is the best Postgres does for C clients.
func bestLimit[K comparable](limits map[K]Run, r Run) (Run, bool) {
	var best Run
	for _, l := range limits {
		if l.Phase == r.Phase && l.Op == r.Op && l.TableRows == r.TableRows && l.Repeat == r.Repeat &&
			l.C <= r.C && l.TPS > best.TPS {
			best = l
		}
	}
	return best, best.TPS > 0
}

func phaseRank(p string) int { return slices.Index([]string{phaseMatrix, phaseGrowth}, p) }
func opRank(o string) int    { return slices.Index([]string{opIssue, opSpend, opLookup}, o) }
func sideRank(s string) int {
	return slices.Index([]string{sideLimit, sideTokend, sideCached, sideCeiling}, s)
}

// scenarioName is how a row is named in the table.
func scenarioName(op, side string) string {
	switch side {
	case sideLimit:
		return op + " limit (pgbench)"
	case sideCached:
		return op + " tokend+redis"
	case sideCeiling:
		return op + " tokend, no lookup (ceiling)"
	}
	return op + " tokend"
}

// writeTable prints the summary as an aligned text table.
func writeTable(w io.Writer, res *Results) error {
	names := make([]string, len(res.Summary))
	width := len("scenario")
	for i, r := range res.Summary {
		names[i] = scenarioName(r.Op, r.Side)
		if r.Phase == phaseGrowth {
			names[i] = fmt.Sprintf("%s @%s (%s tokens)", names[i], humanCount(r.TableRows), humanCount(r.RowsAtStart))
		}
		width = max(width, len(names[i]))
	}
	// Right-aligned numbers; names padded to one width stay left-aligned.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tC\tclients\ttps\tp50 ms\tp99 ms\tvs limit\tlimit C\tcpu µs/op\tmachine µs/op\terrors\t\n", width, "scenario")
	phase := ""
	for i, r := range res.Summary {
		if r.Phase != phase {
			phase = r.Phase
			if phase == phaseGrowth {
				fmt.Fprintf(tw, "%-*s\t\t\t\t\t\t\t\t\t\t\t\n", width, "growth: spend with more stored tokens")
			}
		}
		name := fmt.Sprintf("%-*s", width, names[i])
		ratio, limitC := "-", "-"
		if r.Side != sideLimit && r.Ratio > 0 {
			ratio, limitC = fmt.Sprintf("%.2f", r.Ratio), strconv.Itoa(r.LimitC)
		}
		cpu, machine := "-", "-"
		if r.CPUPerOp > 0 {
			cpu = fmt.Sprintf("%.0f", r.CPUPerOp)
		}
		if r.MachinePerOp > 0 {
			machine = fmt.Sprintf("%.0f", r.MachinePerOp)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%d\t\n",
			name, r.C, r.Clients, r.TPS, r.P50, r.P99, ratio, limitC, cpu, machine, r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := res.Server
	fmt.Fprintf(w, "\nPostgres %s, database %s: fsync=%s synchronous_commit=%s full_page_writes=%s shared_buffers=%s max_connections=%d; %d CPUs\n",
		s.Version, s.Database, s.Fsync, s.SynchronousCommit, s.FullPageWrites, s.SharedBuffers, s.MaxConnections, res.CPUs)
	fmt.Fprintf(w, "medians of %d repeat(s) of %ds; vs limit = median over repeats of tps / the best limit tps of the same repeat at a concurrency up to C (limit C: where it was best)\n",
		res.Config.Repeats, res.Config.DurationSeconds)
	if line := lookupRatioLine(lookupRatios(res.Runs), res.Cache); line != "" {
		fmt.Fprintln(w, line)
	}
	for _, line := range cpuBoundLines(res.Summary) {
		fmt.Fprintln(w, line)
	}
	if line := growthRatioLine(growthRatio(res.Summary)); line != "" {
		fmt.Fprintln(w, line)
	}
	if res.RSS != nil {
		since := "reset before the run"
		if !res.RSS.Reset {
			since = "since tokend started"
		}
		fmt.Fprintf(w, "tokend peak RSS under %s at C=%d: %.1f MiB (VmHWM, %s)\n", res.RSS.Op, res.RSS.C, float64(res.RSS.HWMKB)/1024, since)
	}
	fmt.Fprintf(w, "cache: %s\n", res.Cache)
	if res.Profile != "" {
		fmt.Fprintf(w, "profile: %s\n", res.Profile)
	}
	for _, p := range res.Profiles {
		fmt.Fprintf(w, "profile: %s\n", p)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// lookupRatios pairs every matrix lookup run of tokend+redis and of the
// ceiling with the uncached tokend's run of the same concurrency and repeat,
// and returns the median ratios per concurrency, in increasing order.
func lookupRatios(runs []Run) []LookupRatio {
	type pairKey struct{ c, repeat int }
	uncached := map[pairKey]float64{}
	for _, r := range runs {
		if r.Phase == phaseMatrix && r.Op == opLookup && r.Side == sideTokend {
			uncached[pairKey{r.C, r.Repeat}] = r.TPS
		}
	}
	cached, ceiling := map[int][]float64{}, map[int][]float64{}
	for _, r := range runs {
		if r.Phase != phaseMatrix || r.Op != opLookup {
			continue
		}
		u := uncached[pairKey{r.C, r.Repeat}]
		if u <= 0 {
			continue
		}
		switch r.Side {
		case sideCached:
			cached[r.C] = append(cached[r.C], r.TPS/u)
		case sideCeiling:
			ceiling[r.C] = append(ceiling[r.C], r.TPS/u)
		}
	}
	cs := map[int]bool{}
	for k := range cached {
		cs[k] = true
	}
	for k := range ceiling {
		cs[k] = true
	}
	var out []LookupRatio
	for _, c := range slices.Sorted(maps.Keys(cs)) {
		out = append(out, LookupRatio{C: c, Cached: median(cached[c]), Ceiling: median(ceiling[c])})
	}
	return out
}

// lookupRatioLine prints lookup ratios as one line of the text report, ""
// when there are none.
func lookupRatioLine(ls []LookupRatio, cache string) string {
	if len(ls) == 0 {
		return ""
	}
	cs := make([]string, len(ls))
	for i, l := range ls {
		cs[i] = fmt.Sprint(l.C)
	}
	series := func(f func(LookupRatio) float64) string {
		vs := make([]string, len(ls))
		for i, l := range ls {
			vs[i] = "-"
			if v := f(l); v > 0 {
				vs[i] = fmt.Sprintf("%.2f", v)
			}
		}
		return strings.Join(vs, " ") + " (C=" + strings.Join(cs, ",") + ")"
	}
	cached := series(func(l LookupRatio) float64 { return l.Cached })
	if strings.HasPrefix(cache, "pending") {
		cached += " [cache pending: tokend+redis does not measure a cache]"
	}
	return fmt.Sprintf("lookup: cached/uncached %s; no-lookup ceiling/uncached %s; medians of tps ratios over paired repeats, issue 7 asks cached/uncached ≥ %.0f",
		cached, series(func(l LookupRatio) float64 { return l.Ceiling }), targetCachedPerUncached)
}

// growthRatio compares the growth rows of the largest table with those of
// the smallest; nil without two sizes.
func growthRatio(rows []Row) *GrowthRatio {
	var g GrowthRatio
	tps := map[string]map[int64]float64{}
	for _, r := range rows {
		if r.Phase != phaseGrowth || r.Op != opSpend || r.TableRows <= 0 {
			continue
		}
		if g.SmallRows == 0 || r.TableRows < g.SmallRows {
			g.SmallRows = r.TableRows
		}
		g.LargeRows = max(g.LargeRows, r.TableRows)
		if tps[r.Side] == nil {
			tps[r.Side] = map[int64]float64{}
		}
		tps[r.Side][r.TableRows] = r.TPS
	}
	if g.LargeRows <= g.SmallRows {
		return nil
	}
	ratio := func(side string) float64 {
		if small := tps[side][g.SmallRows]; small > 0 {
			return tps[side][g.LargeRows] / small
		}
		return 0
	}
	g.Tokend, g.Limit = ratio(sideTokend), ratio(sideLimit)
	return &g
}

// growthRatioLine prints g as one line of the text report, "" for nil.
func growthRatioLine(g *GrowthRatio) string {
	if g == nil {
		return ""
	}
	f := func(v float64) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("growth: spend tps @%s / @%s stored tokens: tokend %s (issue 7 asks ≥ %.1f), limit %s (medians)",
		humanCount(g.LargeRows), humanCount(g.SmallRows), f(g.Tokend), targetGrowth, f(g.Limit))
}

// humanCount writes n as 10^k when it is a power of ten, else as is.
func humanCount(n int64) string {
	if n <= 0 {
		return "0"
	}
	k, m := 0, n
	for m%10 == 0 {
		m /= 10
		k++
	}
	if m == 1 && k >= 3 {
		return fmt.Sprintf("10^%d", k)
	}
	if n >= 1_000_000 {
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	if n >= 10_000 {
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// writeFiles writes results.json, results.txt and the plot into dir.
func writeFiles(dir string, res *Results) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	jsonPath := filepath.Join(dir, "results.json")
	if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	var tb strings.Builder
	if err := writeTable(&tb, res); err != nil {
		return nil, err
	}
	txtPath := filepath.Join(dir, "results.txt")
	if err := os.WriteFile(txtPath, []byte(tb.String()), 0o644); err != nil {
		return nil, err
	}
	plots, err := writePlots(dir, res)
	if err != nil {
		return nil, err
	}
	return append([]string{jsonPath, txtPath}, plots...), nil
}

// readResults reads a results.json written by writeFiles.
func readResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &res, nil
}

// cpuBoundLines say, for each issue and spend concurrency of the matrix,
// what the machine's CPU allows: when the CPUs run out in both runs, tps is
// CPUs / machine µs per op, so tokend's ratio to the limit is at most the
// limit's machine µs/op over tokend's, and a tokend costing no CPU at all
// would still reach only the limit's over (tokend's − tokend's own).
func cpuBoundLines(rows []Row) []string {
	var lines []string
	for _, t := range rows {
		if t.Phase != phaseMatrix || t.Side != sideTokend || (t.Op != opIssue && t.Op != opSpend) || t.MachinePerOp <= 0 {
			continue
		}
		i := slices.IndexFunc(rows, func(l Row) bool {
			return l.Phase == t.Phase && l.Op == t.Op && l.Side == sideLimit && l.C == t.LimitC && l.MachinePerOp > 0
		})
		if i < 0 {
			continue
		}
		l := rows[i]
		line := fmt.Sprintf("machine CPU per %s at C=%d: limit (C=%d) %.0f µs, tokend %.0f µs, of which tokend's own %.0f: a CPU-bound ratio of at most %.2f",
			t.Op, t.C, l.C, l.MachinePerOp, t.MachinePerOp, t.CPUPerOp, l.MachinePerOp/t.MachinePerOp)
		if rest := t.MachinePerOp - t.CPUPerOp; t.CPUPerOp > 0 && rest > 0 {
			line += fmt.Sprintf(", %.2f if tokend used no CPU", l.MachinePerOp/rest)
		}
		lines = append(lines, line)
	}
	return lines
}
