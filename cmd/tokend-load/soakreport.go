package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The soak's pass marks (issue 43): the last window against the second, or
// the first past the retention horizon (costWindow, refWindow).
const (
	maxCPUGrowth    = 1.10 // CPU per operation, tokend's and Postgres'
	maxP99Growth    = 1.25 // p99 of every request kind
	maxRSSGrowth    = 1.10 // tokend's RSS, against the first window past the horizon
	maxTableGrowth  = 1.20 // tokend's tables, against the first window past the horizon
	goroutineSlack  = 10   // goroutines may move by this much on top of maxRSSGrowth
	soakLineHeader  = "# window end_s ops tokend_us/op pg_us/op p99_ms[issue replay spend lease complete get revoke] feed_lag_p99_ms webhook_lag_p99_ms rss_kb goroutines tokend_table_bytes tokens_live analyzes errors"
	exampleTablePfx = "ledger_" // the example business's tables: its entries grow with every credit by design
)

// KindStats is one kind's figures in a window: requests answered as
// expected (or events seen) and their latency (lag), errors and skips.
type KindStats struct {
	Count    int64   `json:"count"`
	Errors   int64   `json:"errors"`
	Skipped  int64   `json:"skipped,omitempty"` // slots with nothing to act on (no young token yet)
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	FirstErr string  `json:"first_error,omitempty"`
}

// TableSize is one table of tokend's schema at a window's end.
type TableSize struct {
	Name       string `json:"name"`
	Bytes      int64  `json:"bytes"` // with indexes and TOAST
	IndexBytes int64  `json:"index_bytes"`
	LiveRows   int64  `json:"live_rows"`
	DeadRows   int64  `json:"dead_rows"`
	Vacuums    int64  `json:"vacuums"`
}

// SoakWindow is one window of a soak.
type SoakWindow struct {
	Index  int                  `json:"index"`
	StartS float64              `json:"start_s"`
	EndS   float64              `json:"end_s"`
	Kinds  map[string]KindStats `json:"kinds"`
	// CPU per request (requests of every kind that got an answer), µs.
	TokendCPUUs float64 `json:"tokend_cpu_us_per_op"`
	PgCPUUs     float64 `json:"pg_cpu_us_per_op"`
	LoadCPUUs   float64 `json:"load_cpu_us_per_op"`
	RSSKB       int64   `json:"tokend_rss_kb"`
	Goroutines  int64   `json:"tokend_goroutines"`
	// Conns is the HTTP connections open to tokend at the sample, the
	// load's and the feed follower's: net/http holds a goroutine for each.
	Conns     int64       `json:"tokend_http_conns"`
	HeapBytes int64       `json:"tokend_heap_inuse_bytes"`
	Tables    []TableSize `json:"tables,omitempty"`
	Analyzed  int64       `json:"tokens_analyzes"` // ANALYZEs of tokens so far, autovacuum's included
	PoolDepth int         `json:"pool_depth"`      // atomic tokens waiting to be spent or revoked
}

// Requests is how many requests of the soak's kinds were answered in w.
func (w SoakWindow) Requests() int64 {
	var n int64
	for _, k := range requestKinds {
		n += w.Kinds[k].Count + w.Kinds[k].Errors
	}
	return n
}

// Errors is every error of w, of every kind.
func (w SoakWindow) Errors() int64 {
	var n int64
	for _, k := range w.Kinds {
		n += k.Errors
	}
	return n
}

// TokendTableBytes is the bytes of tokend's own tables, the example
// ledger's left out.
func (w SoakWindow) TokendTableBytes() int64 {
	var n int64
	for _, t := range w.Tables {
		if !strings.HasPrefix(t.Name, exampleTablePfx) {
			n += t.Bytes
		}
	}
	return n
}

func (w SoakWindow) table(name string) TableSize {
	for _, t := range w.Tables {
		if t.Name == name {
			return t
		}
	}
	return TableSize{}
}

// SoakResult is what soak.json holds.
type SoakResult struct {
	Started             time.Time    `json:"started"`
	Finished            time.Time    `json:"finished"`
	Config              SoakConfig   `json:"config"`
	Windows             []SoakWindow `json:"windows"`
	DuplicateDeliveries int64        `json:"duplicate_deliveries"`
	Verdict             Verdict      `json:"verdict"`
}

// Criterion is one pass mark and how the soak did against it.
type Criterion struct {
	Name string `json:"name"`
	Rule string `json:"rule"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// Verdict is every criterion; Pass when all passed.
type Verdict struct {
	Pass     bool        `json:"pass"`
	Criteria []Criterion `json:"criteria"`
}

// winStats collects a window's samples as they come.
type winStats struct {
	lat      map[string][]time.Duration
	errs     map[string]int64
	firstErr map[string]string
	skipped  map[string]int64
}

func newWinStats() *winStats {
	return &winStats{lat: map[string][]time.Duration{}, errs: map[string]int64{}, firstErr: map[string]string{}, skipped: map[string]int64{}}
}

func (w *winStats) add(kind string, d time.Duration, err error) {
	if err != nil {
		if w.errs[kind] == 0 {
			w.firstErr[kind] = tail(err.Error(), 300)
		}
		w.errs[kind]++
		return
	}
	w.lat[kind] = append(w.lat[kind], d)
}

func (w *winStats) window() SoakWindow {
	out := SoakWindow{Kinds: map[string]KindStats{}}
	for _, k := range slices.Concat(requestKinds, lagKinds) {
		l := w.lat[k]
		slices.Sort(l)
		ks := KindStats{Count: int64(len(l)), Errors: w.errs[k], Skipped: w.skipped[k], FirstErr: w.firstErr[k],
			P50: ms(percentile(l, 0.50)), P99: ms(percentile(l, 0.99))}
		if len(l) > 0 {
			ks.Max = ms(l[len(l)-1])
		}
		out.Kinds[k] = ks
	}
	return out
}

// refWindow is the first window that ends past the horizon, when the tables
// can hold all the retention settings keep: RSS and tables are judged
// against it. -1 when none does.
func refWindow(cfg SoakConfig, ws []SoakWindow) int {
	h := cfg.horizon().Seconds()
	for i, w := range ws {
		if w.EndS >= h {
			return i
		}
	}
	return -1
}

// costWindow is the window CPU per operation and p99 are judged against:
// the second (the first has the cold start in it), or, when the retention
// horizon ends after the second starts, the first window that starts past
// it. Until then the sweeper has nothing to delete and the tables, their
// indexes and autovacuum's work are still growing to what the settings
// keep, so the cost per operation is still rising to its steady state
// (Postgres's by 1.27× between 60 s windows 2 and 5 of a quiet soak,
// bench/results/soak.md). A soak with no such window but the last falls
// back to the second.
func costWindow(cfg SoakConfig, ws []SoakWindow) int {
	h := cfg.horizon().Seconds()
	for i := 1; i < len(ws)-1; i++ {
		if ws[i].StartS >= h {
			return i
		}
	}
	return 1
}

// judgeSoak checks ws against the pass marks: the last window against
// costWindow's for CPU per operation and p99; the last against the first
// window past the retention horizon for RSS, goroutines and tokend's table
// bytes; no error of any kind; every kind seen in every window.
func judgeSoak(cfg SoakConfig, ws []SoakWindow) Verdict {
	var v Verdict
	add := func(name, rule, got string, pass bool) {
		v.Criteria = append(v.Criteria, Criterion{Name: name, Rule: rule, Got: got, Pass: pass})
	}
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	if len(ws) < 3 {
		add("windows", "at least 3 windows", fmt.Sprintf("%d", len(ws)), false)
	} else {
		bi := costWindow(cfg, ws)
		base, last := ws[bi], ws[len(ws)-1]
		which := "the second window"
		if bi != 1 {
			which = fmt.Sprintf("window %d, the first wholly past the retention horizon (%.0f s)", bi+1, cfg.horizon().Seconds())
		}
		for _, c := range []struct {
			name   string
			a, b   float64
			absent bool
		}{
			{"tokend CPU/op", last.TokendCPUUs, base.TokendCPUUs, cfg.PID == 0},
			{"Postgres CPU/op", last.PgCPUUs, base.PgCPUUs, cfg.PgPID == 0},
		} {
			rule := fmt.Sprintf("last ≤ %.2f× %s", maxCPUGrowth, which)
			if c.absent || c.b <= 0 {
				add(c.name, rule, "not measured", false)
				continue
			}
			r := ratio(c.a, c.b)
			add(c.name, rule, fmt.Sprintf("%.0f → %.0f µs: %.2f×", c.b, c.a, r), r <= maxCPUGrowth)
		}
		for _, k := range requestKinds {
			a, b := last.Kinds[k], base.Kinds[k]
			rule := fmt.Sprintf("last ≤ %.2f× %s", maxP99Growth, which)
			if a.Count == 0 || b.Count == 0 {
				add("p99 "+k, rule, "no samples", false)
				continue
			}
			r := ratio(a.P99, b.P99)
			add("p99 "+k, rule, fmt.Sprintf("%.1f → %.1f ms: %.2f×", b.P99, a.P99, r), r <= maxP99Growth)
		}
	}
	ref := refWindow(cfg, ws)
	horizon := fmt.Sprintf("window %d, the first past the retention horizon (%.0f s)", ref+1, cfg.horizon().Seconds())
	if ref < 0 || ref == len(ws)-1 {
		got := fmt.Sprintf("no window after the horizon (%.0f s)", cfg.horizon().Seconds())
		add("RSS flat", "last ≤ "+fmt.Sprintf("%.2f×", maxRSSGrowth)+" the first window past the horizon", got, false)
		add("goroutines flat", "likewise, +"+fmt.Sprint(goroutineSlack), got, false)
		add("tables bounded", fmt.Sprintf("tokend's tables last ≤ %.2f× the first window past the horizon", maxTableGrowth), got, false)
	} else {
		r0, last := ws[ref], ws[len(ws)-1]
		if cfg.PID == 0 || r0.RSSKB == 0 {
			add("RSS flat", "measured", "not measured", false)
		} else {
			r := ratio(float64(last.RSSKB), float64(r0.RSSKB))
			add("RSS flat", fmt.Sprintf("last ≤ %.2f× %s", maxRSSGrowth, horizon),
				fmt.Sprintf("%s → %s: %.2f×", humanKB(r0.RSSKB), humanKB(last.RSSKB), r), r <= maxRSSGrowth)
		}
		// A goroutine per open connection follows the open-loop client's
		// tails, not tokend: judged net of them.
		g0, g1 := r0.Goroutines-r0.Conns, last.Goroutines-last.Conns
		lim := int64(float64(g0)*maxRSSGrowth) + goroutineSlack
		add("goroutines flat", fmt.Sprintf("last ≤ %.2f× +%d of %s, net of open connections", maxRSSGrowth, goroutineSlack, horizon),
			fmt.Sprintf("%d → %d (%d−%d → %d−%d)", g0, g1, r0.Goroutines, r0.Conns, last.Goroutines, last.Conns), r0.Goroutines > 0 && g1 <= lim)
		if r0.TokendTableBytes() == 0 {
			add("tables bounded", "measured (-db)", "not measured", false)
		} else {
			r := ratio(float64(last.TokendTableBytes()), float64(r0.TokendTableBytes()))
			add("tables bounded", fmt.Sprintf("tokend's tables last ≤ %.2f× %s", maxTableGrowth, horizon),
				fmt.Sprintf("%s → %s: %.2f×", humanBytes(r0.TokendTableBytes()), humanBytes(last.TokendTableBytes()), r), r <= maxTableGrowth)
		}
	}
	var errs int64
	var first string
	for _, w := range ws {
		errs += w.Errors()
		for _, k := range slices.Concat(requestKinds, lagKinds) {
			if first == "" && w.Kinds[k].FirstErr != "" {
				first = fmt.Sprintf(" (window %d, %s: %s)", w.Index, k, w.Kinds[k].FirstErr)
			}
		}
	}
	add("zero errors", "no error of any kind in any window", fmt.Sprintf("%d%s", errs, first), errs == 0 && len(ws) > 0)
	var missing []string
	for _, w := range ws {
		for _, k := range slices.Concat(requestKinds, lagKinds) {
			if w.Kinds[k].Count == 0 {
				missing = append(missing, fmt.Sprintf("%s in window %d", k, w.Index))
			}
		}
	}
	got := "all"
	if len(missing) > 0 {
		got = "none of " + strings.Join(missing[:min(len(missing), 6)], ", ")
		if len(missing) > 6 {
			got += fmt.Sprintf(" and %d more", len(missing)-6)
		}
	}
	add("every kind", "every request kind, feed events and webhook deliveries in every window", got, len(missing) == 0 && len(ws) > 0)
	v.Pass = true
	for _, c := range v.Criteria {
		v.Pass = v.Pass && c.Pass
	}
	return v
}

// soakLine is a window's one-line summary, as printed while the soak runs.
func soakLine(w SoakWindow) string {
	var p99 []string
	for _, k := range requestKinds {
		p99 = append(p99, fmt.Sprintf("%.1f", w.Kinds[k].P99))
	}
	return fmt.Sprintf("W %d %.0f %d %.0f %.0f %s %.0f %.0f %d %d %d %d %d %d",
		w.Index, w.EndS, w.Requests(), w.TokendCPUUs, w.PgCPUUs, strings.Join(p99, " "),
		w.Kinds[kindFeed].P99, w.Kinds[kindWebhook].P99, w.RSSKB, w.Goroutines, w.TokendTableBytes(),
		w.table("tokens").LiveRows, w.Analyzed, w.Errors())
}

// writeSoakReport writes the per-window tables and the verdict.
func writeSoakReport(out io.Writer, res *SoakResult) error {
	c := res.Config
	fmt.Fprintf(out, "soak of %s: %.0f s at %g slots/s (open loop), %.0f s windows, ttl %d s, retention %d s, event retention %.0f s, sweep every %.0f s; started %s\n",
		c.URL, c.DurationS, c.Rate, c.WindowS, c.TTLSeconds, c.RetentionS, c.EventRetentionS, c.SweepIntervalS, res.Started.Format(time.RFC3339))
	for _, n := range c.Notes {
		fmt.Fprintln(out, "note:", n)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "win\tend s\treq/s\ttokend µs/op\tpg µs/op\tload µs/op\tRSS\tgoroutines\theap\ttokend tables\ttokens live/dead\tevents live\tledger\tanalyzes\tpool\terrors\t")
	for _, w := range res.Windows {
		d := max(w.EndS-w.StartS, 1e-9)
		tok, ev := w.table("tokens"), w.table("token_events")
		var ledger int64
		for _, t := range w.Tables {
			if strings.HasPrefix(t.Name, exampleTablePfx) {
				ledger += t.Bytes
			}
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%s\t%d\t%s\t%s\t%d/%d\t%d\t%s\t%d\t%d\t%d\t\n",
			w.Index, w.EndS, float64(w.Requests())/d, w.TokendCPUUs, w.PgCPUUs, w.LoadCPUUs, humanKB(w.RSSKB),
			w.Goroutines, humanBytes(w.HeapBytes), humanBytes(w.TokendTableBytes()), tok.LiveRows, tok.DeadRows,
			ev.LiveRows, humanBytes(ledger), w.Analyzed, w.PoolDepth, w.Errors())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "p50 / p99 ms per kind (feed and webhook: lag behind the event's time; count in brackets):")
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	kinds := slices.Concat(requestKinds, lagKinds)
	fmt.Fprintln(tw, "win\t"+strings.Join(kinds, "\t")+"\t")
	for _, w := range res.Windows {
		fmt.Fprintf(tw, "%d\t", w.Index)
		for _, k := range kinds {
			ks := w.Kinds[k]
			fmt.Fprintf(tw, "%.1f / %.1f [%d]\t", ks.P50, ks.P99, ks.Count)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Windows) > 0 {
		last := res.Windows[len(res.Windows)-1]
		fmt.Fprintln(out)
		fmt.Fprintln(out, "tables at the end (bytes with indexes / index bytes, live / dead rows, vacuums):")
		for _, t := range last.Tables {
			fmt.Fprintf(out, "  %-28s %9s / %9s  %8d / %-8d %d\n", t.Name, humanBytes(t.Bytes), humanBytes(t.IndexBytes), t.LiveRows, t.DeadRows, t.Vacuums)
		}
	}
	fmt.Fprintf(out, "\nduplicate webhook deliveries (at least once: not errors): %d\n", res.DuplicateDeliveries)
	var errLines []string
	for _, w := range res.Windows {
		for _, k := range kinds {
			if ks := w.Kinds[k]; ks.Errors > 0 {
				errLines = append(errLines, fmt.Sprintf("  window %d %s: %d errors, e.g. %s", w.Index, k, ks.Errors, ks.FirstErr))
			}
			if ks := w.Kinds[k]; ks.Skipped > 0 {
				errLines = append(errLines, fmt.Sprintf("  window %d %s: %d slots skipped (no young token to act on)", w.Index, k, ks.Skipped))
			}
		}
	}
	if len(errLines) > 0 {
		fmt.Fprintln(out, "errors and skips:")
		fmt.Fprintln(out, strings.Join(errLines, "\n"))
	}
	fmt.Fprintln(out)
	verdict := "PASS"
	if !res.Verdict.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(out, "verdict: %s\n", verdict)
	tw = tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	for _, cr := range res.Verdict.Criteria {
		mark := "pass"
		if !cr.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t(%s)\n", mark, cr.Name, cr.Got, cr.Rule)
	}
	return tw.Flush()
}

func humanKB(kb int64) string { return humanBytes(kb * 1024) }

func humanBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
