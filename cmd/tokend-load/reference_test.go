package main

import (
	"context"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokend/tokend/migrations"
)

// tools returns the paths of pgbench and psql, skipping the test without them.
func tools(t *testing.T) (pgbenchPath, psqlPath string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs pgbench against Postgres")
	}
	var err error
	if pgbenchPath, err = exec.LookPath("pgbench"); err != nil {
		t.Skip("pgbench not on PATH")
	}
	if psqlPath, err = exec.LookPath("psql"); err != nil {
		t.Skip("psql not on PATH")
	}
	return pgbenchPath, psqlPath
}

// TestReferenceScripts runs every reference script of bench/ on tokend's
// schema, limit only, through the same code path scripts/bench uses, and
// checks that a spend did all of its writes exactly once per token.
func TestReferenceScripts(t *testing.T) {
	pgbenchPath, psqlPath := tools(t)
	url := ledgertest.NewURL(t)
	cfg := Config{
		db: url, benchDir: "../../bench", out: t.TempDir(), pgbench: pgbenchPath, psql: psqlPath,
		Concurrency: []int{2}, DurationSeconds: 1, Repeats: 1, Ops: []string{opIssue, opSpend, opLookup},
		GrowthRows: []int64{3000}, GrowthC: 2, RSSC: 2, Accounts: 10, Headroom: 5,
	}
	var out, log strings.Builder
	if err := run(context.Background(), cfg, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	res, err := readResults(filepath.Join(cfg.out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, r := range res.Runs {
		if r.Side != sideLimit || r.TPS <= 0 || r.OK <= 0 || r.Errors != 0 || r.Note != "" || r.P99 <= 0 {
			t.Errorf("bad run %+v", r)
		}
		ops = append(ops, r.Phase+"/"+r.Op)
	}
	if want := []string{"matrix/issue", "matrix/spend", "matrix/lookup", "growth/spend"}; !slices.Equal(ops, want) {
		t.Errorf("runs %v, want %v", ops, want)
	}
	if res.Server.Fsync == "" || !strings.Contains(out.String(), "spend limit (pgbench)") {
		t.Errorf("report lacks server settings or rows:\n%s", out.String())
	}

	// The growth spend ran last on emptied tables: every spent pool token has
	// exactly one ledger entry and one spend event, and nothing else was spent.
	db, err := openBenchDB(context.Background(), url, psqlPath, cfg.benchDir, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	var consumed, entries, events, credited, bg int64
	err = db.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM tokens WHERE tenant_id = 'pgb' AND state = 'consumed' AND result_status = 200),
		(SELECT count(*) FROM ledger_entries WHERE tenant_id = 'pgb'),
		(SELECT count(*) FROM token_events WHERE tenant_id = 'pgb' AND kind = 'spend'),
		(SELECT coalesce(sum(balance), 0) FROM ledger_accounts WHERE tenant_id = 'pgb'),
		(SELECT count(*) FROM tokens WHERE tenant_id = 'bg')`).Scan(&consumed, &entries, &events, &credited, &bg)
	if err != nil {
		t.Fatal(err)
	}
	// Every claim went through the unique (tenant_id, secret_hash) index; a
	// scan of tokens_by_state would mean the planner walked all issued tokens.
	var byState int64
	if err := db.pool.QueryRow(context.Background(),
		`SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'tokens_by_state'`).Scan(&byState); err != nil {
		t.Fatal(err)
	}
	if byState != 0 {
		t.Errorf("tokens_by_state was scanned %d times: a reference script took the wrong plan", byState)
	}
	used, err := db.spendKeysUsed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if consumed == 0 || entries != consumed || events != consumed || credited != consumed || used != consumed || bg != 3000 {
		t.Errorf("consumed %d, ledger entries %d, spend events %d, credited %d, keys used %d, background %d",
			consumed, entries, events, credited, used, bg)
	}
}

// TestIndexRebuildKeepsSchema checks that a bulk load with the index drop and
// rebuild leaves tokens with exactly the indexes and constraints it had.
func TestIndexRebuildKeepsSchema(t *testing.T) {
	_, psqlPath := tools(t)
	url := ledgertest.NewURL(t)
	ctx := context.Background()
	if err := migrations.ApplyURL(ctx, url); err != nil {
		t.Fatal(err)
	}
	db, err := openBenchDB(ctx, url, psqlPath, "../../bench", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.close()
	schema := func() []string {
		rows, err := db.pool.Query(ctx, `
			SELECT indexdef FROM pg_indexes WHERE tablename = 'tokens'
			UNION ALL
			SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'tokens'::regclass
			ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	before := schema()
	if err := db.loadTokens(ctx, "bg", 1, 5000, 10, 2, true); err != nil {
		t.Fatal(err)
	}
	if after := schema(); !slices.Equal(before, after) {
		t.Fatalf("schema changed by the rebuild:\nbefore %q\nafter  %q", before, after)
	}
	var n, issued int64
	if err := db.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'issued') FROM tokens`).Scan(&n, &issued); err != nil {
		t.Fatal(err)
	}
	if n != 5000 || issued != 500 {
		t.Fatalf("loaded %d rows, %d issued; want 5000 and 500", n, issued)
	}
	// The unique constraints are back: loading a key twice fails.
	if err := db.loadTokens(ctx, "bg", 5000, 5000, 1, 1, false); err == nil {
		t.Fatal("loading key 5000 twice succeeded: the unique constraints did not come back")
	}
}
