package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/pgtest"
	"github.com/tokend/tokend/internal/proctest"
	"github.com/tokend/tokend/migrations"
)

// TestPoolSettingsInTheURL: the pool's settings in TOKEND_DATABASE_URL, as
// docs/deploy.md advises (pool_max_conns), size the pool and break nothing
// else: migrate, the short commands and serve's own sessions (migrations,
// LISTEN) connect with the same URL. Each used to fail at connect, Postgres
// refusing "pool_max_conns" as a run-time parameter.
func TestPoolSettingsInTheURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.NewURL(t))
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
// with a message saying what to look at, instead of hanging.
func TestMigrateGivesUpOnAHeldLock(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
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
