package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// benchDB is the bench database: what the server is, how many connections it
// has to spare, and bulk loads through the scripts in bench/.
type benchDB struct {
	pool *pgxpool.Pool
	url  string
	psql string    // the psql binary
	dir  string    // bench/
	log  io.Writer // progress of long loads
}

func openBenchDB(ctx context.Context, url, psql, dir string, log io.Writer) (*benchDB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench database: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("bench database: %w", err)
	}
	return &benchDB{pool: pool, url: url, psql: psql, dir: dir, log: log}, nil
}

func (d *benchDB) close() { d.pool.Close() }

// serverInfo is what the report says about the Postgres server. fsync and
// synchronous_commit decide what a commit costs, so they are always shown.
type serverInfo struct {
	Version           string `json:"version"`
	Database          string `json:"database"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	FullPageWrites    string `json:"full_page_writes"`
	SharedBuffers     string `json:"shared_buffers"`
	MaxConnections    int    `json:"max_connections"`
}

// Durable reports whether commits reach the disk before they are confirmed.
func (s serverInfo) Durable() bool { return s.Fsync == "on" && s.SynchronousCommit != "off" }

func (d *benchDB) info(ctx context.Context) (serverInfo, error) {
	var s serverInfo
	err := d.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_database(),
		current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes'),
		current_setting('shared_buffers'), current_setting('max_connections')::int`).Scan(
		&s.Version, &s.Database, &s.Fsync, &s.SynchronousCommit, &s.FullPageWrites, &s.SharedBuffers, &s.MaxConnections)
	if err != nil {
		return s, fmt.Errorf("server settings: %w", err)
	}
	return s, nil
}

// freeConnections is how many more client connections the server takes now,
// its superuser-reserved slots left alone.
func (d *benchDB) freeConnections(ctx context.Context) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int
		- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&n)
	return n, err
}

// runPSQL runs a script of bench/ with psql, setting vars with -v.
func (d *benchDB) runPSQL(ctx context.Context, script string, vars map[string]string) error {
	args := []string{"-X", "-q", "-w", "-v", "ON_ERROR_STOP=1", "-d", d.url, "-f", filepath.Join(d.dir, script)}
	for k, v := range vars {
		args = append(args, "-v", k+"="+v)
	}
	cmd := exec.CommandContext(ctx, d.psql, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("psql %s: %v: %s", script, err, tail(out.String(), 800))
	}
	return nil
}

// loadTokens loads keys from..to (inclusive) of tenant with
// bench/load_tokens.sql, split over parallel psql sessions. With rebuild,
// the indexes are dropped before and built again after.
func (d *benchDB) loadTokens(ctx context.Context, tenant string, from, to int64, issuedEvery, parallel int, rebuild bool) error {
	if to < from {
		return nil
	}
	t := time.Now()
	stage := func(name string) {
		if rebuild {
			fmt.Fprintf(d.log, "[%s]   %s in %s\n", time.Now().Format("15:04:05"), name, time.Since(t).Round(time.Millisecond))
			t = time.Now()
		}
	}
	if rebuild {
		if err := d.runPSQL(ctx, "index_drop.sql", nil); err != nil {
			return err
		}
	}
	parallel = int(min(int64(max(parallel, 1)), to-from+1))
	step := (to - from + 1 + int64(parallel) - 1) / int64(parallel)
	g, gctx := errgroup.WithContext(ctx)
	for lo := from; lo <= to; lo += step {
		hi := min(lo+step-1, to)
		g.Go(func() error {
			return d.runPSQL(gctx, "load_tokens.sql", map[string]string{
				"tenant": tenant, "from": strconv.FormatInt(lo, 10), "to": strconv.FormatInt(hi, 10),
				"issued_every": strconv.Itoa(issuedEvery),
			})
		})
	}
	err := g.Wait()
	stage(fmt.Sprintf("inserted %d rows in %d sessions", to-from+1, parallel))
	if rebuild {
		// Rebuild even after a failed load, so the schema is whole again.
		if rerr := d.runPSQL(ctx, "index_restore.sql", nil); err == nil {
			err = rerr
		}
		stage("rebuilt the indexes")
	}
	if err != nil {
		return err
	}
	// Fresh statistics, or the planner may take the spend's claim
	// (tenant_id, secret_hash, state = 'issued') through tokens_by_state and
	// scan every issued token of the tenant, as it does on a never-analyzed
	// table.
	_, err = d.pool.Exec(ctx, `ANALYZE tokens`)
	return err
}

// spendKeysUsed is how many keys bench_spend_seq has handed out.
func (d *benchDB) spendKeysUsed(ctx context.Context) (int64, error) {
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM bench_spend_seq`).Scan(&n)
	return n, err
}

// resetData empties the tables the load writes and restarts the spend keys;
// API keys and operation policies stay.
func (d *benchDB) resetData(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `TRUNCATE tokens, token_events, ledger_entries, ledger_accounts`)
	if err == nil {
		_, err = d.pool.Exec(ctx, `ALTER SEQUENCE bench_spend_seq RESTART`)
	}
	return err
}

// vacuumAnalyze settles the tables after a load, so plans and visibility do
// not change under a timed run (and autovacuum has less reason to start in one).
func (d *benchDB) vacuumAnalyze(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `VACUUM (ANALYZE) tokens, token_events, ledger_entries, ledger_accounts`)
	return err
}

// tokenRows is the number of rows in tokens: exact up to a million, the
// planner's estimate (fresh after vacuumAnalyze) beyond.
func (d *benchDB) tokenRows(ctx context.Context) (int64, error) {
	var est float64
	if err := d.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'tokens'::regclass`).Scan(&est); err != nil {
		return 0, err
	}
	if est > 1e6 {
		return int64(est), nil
	}
	var n int64
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM tokens`).Scan(&n)
	return n, err
}
