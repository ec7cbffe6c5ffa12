package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/migrations"
)

// Tenants of the rows pgbench works on, apart from tokend's own (the API
// key's): the limit's pool and the growth background.
const (
	limitTenant      = "pgb"
	backgroundTenant = "bg"
)

// Pool sizing. Spends need one unspent token each: pools are topped up
// before every spend run to what the fastest rate seen so far could use.
const (
	initialLimitKeys = 20_000 // first pgbench pool, also the lookup pool
	minLimitTopUp    = 20_000
	guessLimitTPS    = 2_000 // until a spend run has been measured
	guessServiceTPS  = 800
	preIssueWorkers  = 16
	// rebuildRows is the smallest growth load that drops and rebuilds the
	// indexes around the insert (bench/index_drop.sql), several times faster
	// than growing them row by row.
	rebuildRows = 500_000
)

// bench is one bench run.
type bench struct {
	cfg    Config
	db     *benchDB
	pgb    *pgbench
	svc    *target // nil: limit only
	cached *target // nil: cached column pending
	pool   *tokenPool
	res    *Results
	log    io.Writer

	limitKeys int64              // keys 1..limitKeys of limitTenant are loaded
	bgRows    int64              // background rows loaded
	bestTPS   map[string]float64 // fastest spend/issue seen, per side, to size pools
	warmed    map[string]int     // lookup ids already read once, per side
	pprof     bool               // -pprof-url serves /debug/pprof/
	ceiling   bool               // the -url tokend answers ceilingRequest as expected
}

func run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if cfg.report != "" {
		res, err := readResults(cfg.report)
		if err != nil {
			return err
		}
		return finish(cfg.out, res, stdout, stderr)
	}
	if cfg.migrate {
		// tokend's schema and the example ledger's, whose tables the limit writes.
		if _, err := migrations.ApplyURLCount(ctx, cfg.db, migrations.Schema, ledger.Migrations); err != nil {
			return err
		}
	}
	db, err := openBenchDB(ctx, cfg.db, cfg.psql, cfg.benchDir, stderr)
	if err != nil {
		return err
	}
	defer db.close()
	b := &bench{
		cfg: cfg, db: db,
		pgb:     &pgbench{path: cfg.pgbench, db: cfg.db, dir: cfg.benchDir},
		pool:    newTokenPool(runID(), cfg.Accounts),
		log:     stderr,
		bestTPS: map[string]float64{},
		warmed:  map[string]int{},
		res:     &Results{Started: time.Now().UTC(), Config: cfg, CPUs: runtime.NumCPU(), Notes: slices.Clone(cfg.notes)},
	}
	if cfg.URL != "" {
		b.svc = &target{base: cfg.URL, key: cfg.key}
	}
	if cfg.CachedURL != "" {
		b.cached = &target{base: cfg.CachedURL, key: cfg.key}
	}
	if err := b.run(ctx); err != nil {
		// Keep what was measured: a partial report beats none.
		b.res.Notes = append(b.res.Notes, "run stopped early: "+err.Error())
		b.finishResults()
		_ = finish(cfg.out, b.res, stdout, stderr)
		return err
	}
	b.finishResults()
	return finish(cfg.out, b.res, stdout, stderr)
}

func (b *bench) finishResults() {
	b.res.Finished = time.Now().UTC()
	b.res.Summary = summarize(b.res.Runs)
	b.res.LookupRatios = lookupRatios(b.res.Runs)
	b.res.GrowthRatio = growthRatio(b.res.Summary)
}

// finish prints the table and writes the files.
func finish(dir string, res *Results, stdout, stderr io.Writer) error {
	if err := writeTable(stdout, res); err != nil {
		return err
	}
	paths, err := writeFiles(dir, res)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintf(stderr, "wrote %s\n", p)
	}
	return nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) run(ctx context.Context) error {
	info, err := b.db.info(ctx)
	if err != nil {
		return err
	}
	b.res.Server = info
	if !info.Durable() {
		b.res.Notes = append(b.res.Notes, fmt.Sprintf(
			"NOT DURABLE: fsync=%s synchronous_commit=%s; commits are not flushed, so limit and service alike are faster than on a real server",
			info.Fsync, info.SynchronousCommit))
	}
	b.logf("Postgres %s: fsync=%s synchronous_commit=%s max_connections=%d", info.Version, info.Fsync, info.SynchronousCommit, info.MaxConnections)
	if err := b.db.runPSQL(ctx, "setup.sql", nil); err != nil {
		return err
	}
	b.res.Cache = b.cacheState()
	if b.cfg.redis != "" && b.cached != nil && b.cfg.cacheNote == "" {
		// Start from an empty cache database, so checkCache sees only this run.
		if err := redisFlushDB(ctx, b.cfg.redis); err != nil {
			b.res.Notes = append(b.res.Notes, "could not empty the Redis cache database: "+err.Error())
		}
	}
	b.probePprof(ctx)
	if slices.Contains(b.cfg.Ops, opLookup) && b.svc != nil {
		b.probeCeiling()
	}

	if err := b.ensureLimitKeys(ctx, initialLimitKeys); err != nil {
		return err
	}
	secs := b.cfg.DurationSeconds
	for _, c := range b.cfg.Concurrency {
		for rep := 1; rep <= b.cfg.Repeats; rep++ {
			b.logf("matrix: C=%d, repeat %d/%d, %ds runs", c, rep, b.cfg.Repeats, secs)
			for _, op := range b.cfg.Ops {
				if err := b.matrixOp(ctx, op, c, rep); err != nil {
					return err
				}
			}
		}
	}
	if slices.Contains(b.cfg.Ops, opLookup) && b.cached != nil {
		b.checkCache(ctx)
	}
	if len(b.cfg.GrowthRows) > 0 {
		if err := b.growth(ctx); err != nil {
			return err
		}
	}
	return nil
}

// matrixOp measures op at concurrency c: the limit, then the service. For
// lookups the service is tokend, then tokend+redis, then the no-lookup
// ceiling on the uncached tokend, so the three are paired like the limit.
func (b *bench) matrixOp(ctx context.Context, op string, c, rep int) error {
	if err := b.limit(ctx, phaseMatrix, op, c, rep, 0); err != nil {
		return err
	}
	if b.svc == nil {
		return nil
	}
	if err := b.service(ctx, phaseMatrix, op, sideTokend, *b.svc, b.cfg.pid, c, rep, 0); err != nil {
		return err
	}
	if op != opLookup {
		return nil
	}
	if b.cached != nil {
		if err := b.service(ctx, phaseMatrix, op, sideCached, *b.cached, b.cfg.cachedPID, c, rep, 0); err != nil {
			return err
		}
	}
	if b.ceiling {
		return b.service(ctx, phaseMatrix, op, sideCeiling, *b.svc, b.cfg.pid, c, rep, 0)
	}
	return nil
}

var limitScript = map[string]string{opIssue: "issue.sql", opSpend: "spend.sql", opLookup: "lookup.sql"}

// limit runs op's reference script with pgbench.
func (b *bench) limit(ctx context.Context, phase, op string, c, rep int, tableRows int64) error {
	secs := b.cfg.DurationSeconds
	free, err := b.db.freeConnections(ctx)
	if err != nil {
		return err
	}
	clients := min(c, free-b.cfg.Headroom)
	if clients < 1 {
		return fmt.Errorf("no Postgres connections to spare for pgbench (%d free, headroom %d)", free, b.cfg.Headroom)
	}
	vars := map[string]string{"tenant": limitTenant}
	switch op {
	case opSpend:
		vars["accounts"] = strconv.Itoa(b.cfg.Accounts)
		if err := b.ensureLimitKeys(ctx, b.need(sideLimit, guessLimitTPS, clients)); err != nil {
			return err
		}
	case opLookup:
		vars["pool"] = strconv.FormatInt(b.limitKeys, 10)
	}
	rowsAtStart := b.rowsNow(ctx, phase)
	m0, mErr0 := machineCPU()
	r, err := b.pgb.run(ctx, limitScript[op], clients, secs, vars)
	if err == nil && r.Aborted && op == opSpend {
		// Most likely the pool ran dry: load twice what the run got through and retry once.
		used, uerr := b.db.spendKeysUsed(ctx)
		if uerr == nil && used >= b.limitKeys {
			b.logf("limit spend ran out of tokens at %d; loading more and retrying", used)
			b.bestTPS[sideLimit] = max(b.bestTPS[sideLimit], 2*float64(used)/float64(secs))
			if err = b.ensureLimitKeys(ctx, b.need(sideLimit, guessLimitTPS, clients)); err == nil {
				m0, mErr0 = machineCPU()
				r, err = b.pgb.run(ctx, limitScript[op], clients, secs, vars)
			}
		}
	}
	m1, mErr1 := machineCPU()
	if err != nil {
		return err
	}
	run := Run{
		Phase: phase, Op: op, Side: sideLimit, TableRows: tableRows, C: c, Clients: clients, Repeat: rep,
		TPS: r.TPS, P50: ms(percentile(r.Latencies, 0.50)), P99: ms(percentile(r.Latencies, 0.99)),
		OK: r.Processed, Errors: r.Failed, Elapsed: float64(secs), RowsAtStart: rowsAtStart,
		MachinePerOp: perOp(m0, m1, mErr0, mErr1, r.Processed),
	}
	if r.Aborted {
		run.Note = "pgbench aborted: " + r.Stderr
		run.Errors++
	}
	if clients < c {
		run.Note = joinNote(run.Note, fmt.Sprintf("pgbench limited to %d connections by max_connections", clients))
	}
	if op == opSpend {
		b.bestTPS[sideLimit] = max(b.bestTPS[sideLimit], r.TPS)
	}
	b.record(run)
	return nil
}

// service drives tokend at tgt with c workers.
func (b *bench) service(ctx context.Context, phase, op, side string, tgt target, pid, c, rep int, tableRows int64) error {
	secs := b.cfg.DurationSeconds
	d := time.Duration(secs) * time.Second
	var req request
	switch {
	case side == sideCeiling:
		req = ceilingRequest(tgt)
	case op == opIssue:
		req = issueRequest(tgt, b.pool, 0)
	case op == opSpend:
		need := b.need(side, guessServiceTPS, c)
		if err := b.ensureTokens(ctx, tgt, need); err != nil {
			return err
		}
		req = spendRequest(tgt, b.pool)
	case op == opLookup:
		ids := b.pool.lookupIDs()
		if len(ids) == 0 {
			if err := b.ensureTokens(ctx, tgt, 1000); err != nil {
				return err
			}
			ids = b.pool.lookupIDs()
		}
		if w := b.warmed[side]; w < len(ids) {
			if r := getAll(ctx, tgt, preIssueWorkers, ids[w:]); r.Errors > 0 {
				return fmt.Errorf("%s: warming lookups: %d errors, e.g. %s", side, r.Errors, r.FirstErr)
			}
			b.warmed[side] = len(ids)
		}
		req = getRequest(tgt, ids)
	}

	trackRSS := pid > 0 && op == opSpend && c == b.cfg.RSSC && phase == phaseMatrix
	rssReset := false
	if trackRSS {
		rssReset = resetPeakRSS(pid) == nil
	}
	var profile chan string
	if b.pprof && side == sideTokend && (op == opSpend || op == opIssue) && c == b.cfg.RSSC && rep == 1 && phase == phaseMatrix {
		profile = make(chan string, 1)
		go func() { profile <- b.fetchProfile(ctx, op, secs) }()
	}
	rowsAtStart := b.rowsNow(ctx, phase)
	cpu0, cpuErr := procCPU(pid)
	m0, mErr0 := machineCPU()
	r := runLoad(ctx, tgt, c, d, req)
	m1, mErr1 := machineCPU()
	cpu1, cpuErr1 := procCPU(pid)

	run := Run{
		Phase: phase, Op: op, Side: side, TableRows: tableRows, C: c, Clients: c, Repeat: rep,
		TPS: r.TPS(), P50: ms(percentile(r.Latencies, 0.50)), P99: ms(percentile(r.Latencies, 0.99)),
		OK: r.OK, Errors: r.Errors, Elapsed: r.Elapsed.Seconds(), RowsAtStart: rowsAtStart,
		MachinePerOp: perOp(m0, m1, mErr0, mErr1, r.OK),
	}
	if pid > 0 {
		run.CPUPerOp = perOp(cpu0, cpu1, cpuErr, cpuErr1, r.OK)
	}
	if r.Errors > 0 {
		run.Note = "e.g. " + tail(r.FirstErr, 160)
	}
	if r.Exhausted {
		run.Note = joinNote(run.Note, fmt.Sprintf("ran out of tokens after %.1fs", r.Elapsed.Seconds()))
	}
	if op == opSpend || op == opIssue {
		b.bestTPS[side] = max(b.bestTPS[side], r.TPS())
	}
	if trackRSS {
		if kb, err := peakRSS(pid); err == nil && (b.res.RSS == nil || kb > b.res.RSS.HWMKB) {
			b.res.RSS = &RSS{PID: pid, Op: op, C: c, HWMKB: kb, Reset: rssReset}
		}
	}
	if profile != nil {
		b.res.Profiles = append(b.res.Profiles, op+": "+<-profile)
	}
	b.record(run)
	return nil
}

// need is how many unspent tokens a spend run of c clients could use: the
// fastest rate seen so far on side (or guess), with half again in reserve.
func (b *bench) need(side string, guess float64, c int) int64 {
	tps := max(b.bestTPS[side], guess)
	return int64(tps*float64(b.cfg.DurationSeconds)*1.5) + int64(4*c)
}

// ensureLimitKeys loads issued pool tokens for pgbench until at least n are unspent.
func (b *bench) ensureLimitKeys(ctx context.Context, n int64) error {
	used, err := b.db.spendKeysUsed(ctx)
	if err != nil {
		return err
	}
	if b.limitKeys-used >= n {
		return nil
	}
	add := max(n-(b.limitKeys-used), minLimitTopUp)
	t := time.Now()
	if err := b.db.loadTokens(ctx, limitTenant, b.limitKeys+1, b.limitKeys+add, 1, 1, false); err != nil {
		return err
	}
	b.limitKeys += add
	b.logf("loaded %d pgbench pool tokens in %s (%d in all)", add, time.Since(t).Round(time.Millisecond), b.limitKeys)
	return nil
}

// ensureTokens issues tokens through tgt, untimed, until n are unspent.
func (b *bench) ensureTokens(ctx context.Context, tgt target, n int64) error {
	have := int64(b.pool.remaining())
	if have >= n {
		return nil
	}
	t := time.Now()
	r := runLoad(ctx, tgt, preIssueWorkers, time.Hour, issueRequest(tgt, b.pool, n-have))
	if r.Errors > 0 {
		return fmt.Errorf("pre-issuing tokens: %d errors, e.g. %s", r.Errors, r.FirstErr)
	}
	b.logf("pre-issued %d tokens through the API in %s", r.OK, time.Since(t).Round(time.Millisecond))
	return ctx.Err()
}

// rowsNow counts the tokens table for growth runs (matrix runs skip it).
func (b *bench) rowsNow(ctx context.Context, phase string) int64 {
	if phase != phaseGrowth {
		return 0
	}
	n, _ := b.db.tokenRows(ctx)
	return n
}

func (b *bench) record(r Run) {
	b.res.Runs = append(b.res.Runs, r)
	note := ""
	if r.Note != "" {
		note = " (" + r.Note + ")"
	}
	b.logf("  %-34s C=%-3d clients=%-3d tps=%8.1f p50=%7.2fms p99=%7.2fms errors=%d%s",
		scenarioName(r.Op, r.Side), r.C, r.Clients, r.TPS, r.P50, r.P99, r.Errors, note)
}

// growth measures spends at GrowthC with the table holding each of
// GrowthRows background tokens (one in ten issued, the rest consumed).
func (b *bench) growth(ctx context.Context) error {
	if !slices.Contains(b.cfg.Ops, opSpend) {
		return nil
	}
	b.logf("growth: emptying the tables")
	if err := b.db.resetData(ctx); err != nil {
		return err
	}
	b.limitKeys, b.bgRows = 0, 0
	b.pool.reset()
	c := b.cfg.GrowthC
	for _, size := range b.cfg.GrowthRows {
		add := size - b.bgRows
		t := time.Now()
		b.logf("growth: loading %d background tokens (to %d)", add, size)
		parallel := 1
		if add >= 200_000 {
			parallel = 2
		}
		if err := b.db.loadTokens(ctx, backgroundTenant, b.bgRows+1, size, 10, parallel, add >= rebuildRows); err != nil {
			return err
		}
		b.bgRows = size
		tv := time.Now()
		if err := b.db.vacuumAnalyze(ctx); err != nil {
			return err
		}
		b.logf("  vacuumed in %s", time.Since(tv).Round(time.Millisecond))
		b.logf("growth: loaded in %s", time.Since(t).Round(time.Second))
		b.res.Notes = append(b.res.Notes, fmt.Sprintf("growth %s: %d background rows loaded and vacuumed in %s",
			humanCount(size), add, time.Since(t).Round(time.Second)))
		for rep := 1; rep <= b.cfg.Repeats; rep++ {
			if err := b.limit(ctx, phaseGrowth, opSpend, c, rep, size); err != nil {
				return err
			}
			if b.svc != nil {
				if err := b.service(ctx, phaseGrowth, opSpend, sideTokend, *b.svc, b.cfg.pid, c, rep, size); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cacheState says, before the run, whether the cached column can be measured.
func (b *bench) cacheState() string {
	switch {
	case b.cfg.cacheNote != "":
		return "pending: " + b.cfg.cacheNote
	case b.cached == nil:
		return "pending: no tokend with TOKEND_REDIS_URL (-cached-url) was given"
	}
	return "measured (tokend with TOKEND_REDIS_URL at " + b.cached.base + ")"
}

// checkCache turns the cached column to pending when Redis holds no key
// after the cached instance answered lookups: then it did not cache.
func (b *bench) checkCache(ctx context.Context) {
	if b.cfg.redis == "" || b.cfg.cacheNote != "" {
		return
	}
	n, err := redisDBSize(ctx, b.cfg.redis)
	switch {
	case err != nil:
		b.res.Notes = append(b.res.Notes, "could not check the Redis cache: "+err.Error())
	case n == 0:
		b.res.Cache = "pending: Redis held no key after the cached instance answered lookups; tokend does not cache yet, so tokend+redis measures Postgres again"
	default:
		b.res.Cache += fmt.Sprintf("; Redis held %d keys afterwards", n)
	}
}

// probePprof checks whether -pprof-url serves net/http/pprof: tokend
// serves it only on the listener TOKEND_DEBUG_LISTEN names, never on the API.
func (b *bench) probePprof(ctx context.Context) {
	if b.svc == nil {
		return
	}
	const elsewise = "profile the spend path with: go test -run '^$' -bench BenchmarkSpend -cpuprofile spend.pprof ./consume"
	if b.cfg.PprofURL == "" {
		b.res.Profile = "no -pprof-url, so no profile of tokend: start the -url tokend with TOKEND_DEBUG_LISTEN=127.0.0.1:PORT and pass -pprof-url http://127.0.0.1:PORT (scripts/bench does); or " + elsewise
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.PprofURL+"/debug/pprof/", nil)
	if err != nil {
		b.res.Profile = "-pprof-url: " + err.Error()
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		b.pprof = resp.StatusCode == http.StatusOK
		if !b.pprof {
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	if !b.pprof {
		b.res.Profile = fmt.Sprintf("-pprof-url %s serves no /debug/pprof/ (%v): was the -url tokend started with TOKEND_DEBUG_LISTEN on that address? Or %s",
			b.cfg.PprofURL, err, elsewise)
	}
}

// fetchProfile takes a CPU profile of the -url tokend from its debug
// listener while a run of op goes on and saves it next to the results; it
// returns the path or what went wrong.
func (b *bench) fetchProfile(ctx context.Context, op string, secs int) string {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", b.cfg.PprofURL, max(secs-1, 1))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "profile: " + err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "profile: " + err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "profile: status " + resp.Status
	}
	if err := os.MkdirAll(b.cfg.out, 0o755); err != nil {
		return "profile: " + err.Error()
	}
	path := filepath.Join(b.cfg.out, "tokend-"+op+"-cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return "profile: " + err.Error()
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return "profile: " + err.Error()
	}
	return path + " (go tool pprof -top " + path + ")"
}

// probeCeiling checks, before any run, that the -url tokend answers a GET of
// ceilingID 404 token_not_found with the key, and 401 with a wrong one: then
// the ceiling row measures authenticated requests that reached the handler.
// Otherwise the row is left out, with a note saying why.
func (b *bench) probeCeiling() {
	if err := b.probeCeilingOf(*b.svc); err != nil {
		b.res.Notes = append(b.res.Notes, "no-lookup ceiling left out, tokend did not answer as expected: "+err.Error())
		return
	}
	b.ceiling = true
}

func (b *bench) probeCeilingOf(tgt target) error {
	a, err := newAPI(tgt, 1)
	if err != nil {
		return err
	}
	defer a.close()
	if err := ceilingRequest(tgt)(a, nil); err != nil {
		return err
	}
	bad, err := newAPI(target{base: tgt.base, key: "tokend-load-not-a-key"}, 1)
	if err != nil {
		return err
	}
	defer bad.close()
	ans, err := bad.do(fasthttp.MethodGet, "/v1/tokens/"+ceilingID, nil)
	switch {
	case err != nil:
		return fmt.Errorf("get %s with a wrong key: %w", ceilingID, err)
	case ans.status == http.StatusOK:
		return fmt.Errorf("get %s with a wrong key: found, want 401", ceilingID)
	case ans.status != http.StatusUnauthorized:
		return fmt.Errorf("get %s with a wrong key: status %d, want 401", ceilingID, ans.status)
	}
	return nil
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
