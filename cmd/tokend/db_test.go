package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/migrations"
)

// TestPoolSettingsInTheURL: the pool's settings in TOKEND_DATABASE_URL, as
// docs/deploy.md advises (pool_max_conns), size the pool and break nothing
// else: migrate, the short commands and serve's own sessions (migrations,
// LISTEN) connect with the same URL. Each used to fail at connect, Postgres
// refusing "pool_max_conns" as a run-time parameter.
func TestPoolSettingsInTheURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(ledgertest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "3")
	q.Set("pool_min_conns", "1")
	u.RawQuery = q.Encode()
	dbURL := u.String()

	env := map[string]string{"TOKEND_DATABASE_URL": dbURL}
	for _, args := range [][]string{{"migrate"}, {"keys", "create", "--tenant", "acme", "--role", "client"}} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr); code != 0 {
			t.Fatalf("tokend %s with pool settings in the URL: exit %d, %s", strings.Join(args, " "), code, stderr.String())
		}
	}
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL}) // waits for /healthz
	if logs := srv.Logs(); !strings.Contains(logs, `"max_db_conns":3`) {
		t.Fatalf("serve did not size its pool from pool_max_conns:\n%s", logs)
	}
}

// TestMigrateGivesUpOnAHeldLock: while another session holds a lock the
// migration needs (here the version table, as a crashed migrator's
// session would), `tokend migrate` fails after TOKEND_MIGRATION_LOCK_TIMEOUT
// with a message saying what to look at, instead of hanging; so does
// serve, which migrates at start.
func TestMigrateGivesUpOnAHeldLock(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	holder, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `LOCK TABLE `+migrations.VersionTable+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOKEND_DATABASE_URL": dbURL, "TOKEND_MIGRATION_LOCK_TIMEOUT": "300ms"}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang fails here, not at the suite's timeout
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"migrate"}, func(k string) string { return env[k] }, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "TOKEND_MIGRATION_LOCK_TIMEOUT") || ctx.Err() != nil {
		t.Fatalf("migrate with the lock held: exit %d, stderr %q; want a failure naming TOKEND_MIGRATION_LOCK_TIMEOUT", code, stderr.String())
	}
	// It says who holds the lock: the holder's pid, its state, and the lock.
	for _, want := range []string{fmt.Sprintf("pid %d,", holder.PgConn().PID()), "idle in transaction", "AccessExclusiveLock on " + migrations.VersionTable} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
	if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n != 0 {
		t.Errorf("stderr has %d lines, want one: %q", n+1, stderr.String())
	}
	// serve migrates at start with the same runner, and fails the same way.
	serveEnv := map[string]string{"TOKEND_SECRET_KEY": strings.Repeat("k", 32), "TOKEND_LISTEN": "127.0.0.1:0", "TOKEND_ALLOW_SUPERUSER": "1"}
	for k, v := range env {
		serveEnv[k] = v
	}
	stderr.Reset()
	code = run(ctx, []string{"serve"}, func(k string) string { return serveEnv[k] }, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "TOKEND_MIGRATION_LOCK_TIMEOUT") || !strings.Contains(stderr.String(), fmt.Sprintf("pid %d,", holder.PgConn().PID())) {
		t.Errorf("serve with the lock held: exit %d, stderr %q; want a failure naming TOKEND_MIGRATION_LOCK_TIMEOUT and the holder", code, stderr.String())
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"migrate"}, func(k string) string { return env[k] }, &stdout, &stderr); code != 0 {
		t.Fatalf("migrate once the lock is gone: exit %d, %s", code, stderr.String())
	}
}

func TestPoolingSettings(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@127.0.0.1:6432/db"
	for _, tc := range []struct {
		env  map[string]string
		want string // in the error; "" for none
		mode pgx.QueryExecMode
	}{
		{map[string]string{}, "", pgx.QueryExecModeCacheStatement},
		{map[string]string{"TOKEND_DATABASE_POOLING": "transaction", "TOKEND_DATABASE_SESSION_URL": "postgres://u@127.0.0.1:5432/db"}, "", pgx.QueryExecModeCacheDescribe},
		{map[string]string{"TOKEND_DATABASE_POOLING": "transaction"}, "needs TOKEND_DATABASE_SESSION_URL", 0},
		{map[string]string{"TOKEND_DATABASE_POOLING": "statement"}, "want session or transaction", 0},
		{map[string]string{"TOKEND_DATABASE_SESSION_URL": "::"}, "TOKEND_DATABASE_SESSION_URL", 0},
		{map[string]string{"TOKEND_MIGRATION_LOCK_TIMEOUT": "-1s"}, "TOKEND_MIGRATION_LOCK_TIMEOUT", 0},
	} {
		var cfg dbConfig
		env := func(k string) string {
			if k == "TOKEND_DATABASE_URL" {
				return url
			}
			return tc.env[k]
		}
		if err := parseFlags("migrate", nil, env, &bytes.Buffer{}, cfg.bind); err != nil {
			t.Fatal(err)
		}
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want an error with %q", tc.env, err, tc.want)
		case tc.want == "" && cfg.execMode() != tc.mode:
			t.Errorf("%v: exec mode %v, want %v", tc.env, cfg.execMode(), tc.mode)
		}
	}
}

// TestRefusesTransactionPooling: behind PgBouncer in transaction mode,
// without TOKEND_DATABASE_POOLING=transaction, or with it but a session URL
// that goes through the same PgBouncer, serve and migrate refuse to start,
// in one line naming the setting, rather than start ready and fail
// requests. With a session URL of its own, serve starts. Only in the
// deployment pass of scripts/test, which sets TOKEND_TEST_PGBOUNCER_ADDR.
func TestRefusesTransactionPooling(t *testing.T) {
	addr := os.Getenv("TOKEND_TEST_PGBOUNCER_ADDR")
	if addr == "" {
		t.Skip("TOKEND_TEST_PGBOUNCER_ADDR is unset: no PgBouncer (scripts/test's deployment pass starts one)")
	}
	t.Parallel()
	direct := ledgertest.NewURL(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	pooled := u.String()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no pooling setting", map[string]string{"TOKEND_DATABASE_URL": pooled}, "TOKEND_DATABASE_POOLING=transaction"},
		{"a pooled session URL", map[string]string{"TOKEND_DATABASE_URL": pooled, "TOKEND_DATABASE_POOLING": "transaction", "TOKEND_DATABASE_SESSION_URL": pooled}, "TOKEND_DATABASE_SESSION_URL"},
		// The case issue 48 found: a direct session URL, the requests' URL
		// through the pooler, and the pooling setting forgotten.
		{"a direct session URL, no pooling setting", map[string]string{"TOKEND_DATABASE_URL": pooled, "TOKEND_DATABASE_SESSION_URL": direct}, "TOKEND_DATABASE_POOLING=transaction"},
	} {
		for _, cmd := range []string{"migrate", "serve"} {
			env := map[string]string{"TOKEND_SECRET_KEY": strings.Repeat("k", 32), "TOKEND_LISTEN": "127.0.0.1:0", "TOKEND_ALLOW_SUPERUSER": "1"}
			for k, v := range tc.env {
				env[k] = v
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			var stdout, stderr bytes.Buffer
			code := run(ctx, []string{cmd}, func(k string) string { return env[k] }, &stdout, &stderr)
			timedOut := ctx.Err() != nil
			cancel()
			// Log lines (JSON) may come first; the refusal is one line.
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			for _, l := range lines[:len(lines)-1] {
				if !strings.HasPrefix(l, "{") {
					t.Errorf("%s, %s: a line besides the refusal and the log: %q", tc.name, cmd, l)
				}
			}
			if code == 0 || timedOut || !strings.HasPrefix(last, "tokend: ") || !strings.Contains(last, tc.want) || !strings.Contains(last, "session") {
				t.Errorf("%s, %s: exit %d, stderr %q; want one line naming %s", tc.name, cmd, code, stderr.String(), tc.want)
			}
		}
	}
	// The right settings (proctest's, in this pass: transaction pooling
	// through the PgBouncer, sessions direct): serve starts and is ready.
	srv := proctest.Start(t, proctest.Options{DatabaseURL: direct})
	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz with the right settings: %d", res.StatusCode)
	}
}

// TestDefaultMaxConns: without pool_max_conns the pool is 4 per CPU, but
// never below minPoolConns, the transactions in flight that commit latency
// needs (a tokend pinned to one CPU got 4, and the pool bounded its rate).
func TestDefaultMaxConns(t *testing.T) {
	for _, c := range []struct {
		procs int
		want  int32
	}{{1, minPoolConns}, {2, 8}, {3, 12}, {8, 32}} {
		if got := defaultMaxConns(c.procs); got != c.want {
			t.Errorf("defaultMaxConns(%d) = %d, want %d", c.procs, got, c.want)
		}
	}
}
