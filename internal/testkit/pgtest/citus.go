package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/migrations"
)

// CitusDirEnv names the directory of a Citus cluster made by
// shared/citus/cluster start (its ports file lists the coordinator and the
// workers). When it is set, every test database is made on all the nodes,
// with the citus extension in each and the workers registered in the
// coordinator's copy, and tests connect to the coordinator: the migrations
// distribute the schema (migrations/012), so every test runs against a
// distributed schema.
const CitusDirEnv = "TOKEND_TEST_CITUS_DIR"

// node is one server of the cluster.
type node struct {
	name string
	port int
}

// citusNodes is the cluster of CitusDirEnv, coordinator first; nil without
// one.
var citusNodes = sync.OnceValues(func() ([]node, error) {
	dir := os.Getenv(CitusDirEnv)
	if dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "ports"))
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w (make it with shared/citus/cluster start)", CitusDirEnv, dir, err)
	}
	var nodes []node
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s/ports: bad line %q", dir, line)
		}
		p, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("%s/ports: bad line %q", dir, line)
		}
		nodes = append(nodes, node{f[0], p})
	}
	if len(nodes) < 2 || nodes[0].name != "coordinator" {
		return nil, fmt.Errorf("%s/ports: want the coordinator first and at least one worker", dir)
	}
	return nodes, nil
})

// Citus says whether tests run against a Citus cluster (CitusDirEnv).
func Citus() bool {
	n, _ := citusNodes()
	return n != nil
}

// nodeURL is the URL of database db on port p, with AdminURL's user.
func nodeURL(p int, db string) string {
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + strconv.Itoa(p),
		Path: "/" + db, RawQuery: "sslmode=disable"}).String()
}

// onNodes runs each sql on every node's postgres database: the workers
// first, the coordinator last (so a database appears on the coordinator,
// where tests look, only once the workers have it).
func onNodes(ctx context.Context, sqls ...string) error {
	nodes, err := citusNodes()
	if err != nil {
		return err
	}
	for i := len(nodes) - 1; i >= 0; i-- {
		if err := onNode(ctx, nodes[i].port, "postgres", sqls...); err != nil {
			return fmt.Errorf("%s: %w", nodes[i].name, err)
		}
	}
	return nil
}

func onNode(ctx context.Context, port int, db string, sqls ...string) error {
	c, err := pgx.Connect(ctx, nodeURL(port, db))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for _, s := range sqls {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// createCitusDB creates an empty database name on every node, with citus
// in each and the coordinator and workers registered in the coordinator's
// copy: what shared/citus/cluster createdb does.
func createCitusDB(ctx context.Context, name string) error {
	nodes, err := citusNodes()
	if err != nil {
		return err
	}
	// citus_add_node syncs roles and other cluster-wide objects to the
	// worker, which two databases registering at once update concurrently
	// ("tuple concurrently updated"): one at a time, across test processes.
	lock, err := pgx.Connect(ctx, nodeURL(nodes[0].port, "postgres"))
	if err != nil {
		return err
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_lock(hashtext('pgtest: citus createdb'))"); err != nil {
		return err
	}
	id := pgx.Identifier{name}.Sanitize()
	if err := onNodes(ctx, "CREATE DATABASE "+id); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := onNode(ctx, n.port, name, "CREATE EXTENSION IF NOT EXISTS citus"); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	reg := []string{fmt.Sprintf("SELECT citus_set_coordinator_host('127.0.0.1', %d)", nodes[0].port)}
	for _, n := range nodes[1:] {
		reg = append(reg, fmt.Sprintf("SELECT citus_add_node('127.0.0.1', %d)", n.port))
	}
	return onNode(ctx, nodes[0].port, name, reg...)
}

// sealCitusTemplate makes database from, migrated, the template name on
// every node: no session may stay in a template (the Citus maintenance
// daemon and the coordinator's cached connections to the workers do), so
// connections are refused and ended first. A copy made with CREATE
// DATABASE ... TEMPLATE on each node under one name agrees with the others:
// shard ids and placements are metadata inside the database, and nodes are
// named by host and port.
func sealCitusTemplate(ctx context.Context, from, name string) error {
	f, n := pgx.Identifier{from}.Sanitize(), pgx.Identifier{name}.Sanitize()
	return onNodes(ctx,
		"ALTER DATABASE "+f+" WITH ALLOW_CONNECTIONS false",
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '"+from+"'",
		"DROP DATABASE IF EXISTS "+n+" WITH (FORCE)",
		"ALTER DATABASE "+f+" RENAME TO "+n)
}

// dropCitusDB drops name on every node: the coordinator first, which ends
// its sessions' connections to the workers; a worker whose copy is still
// in use a moment later (a connection closing, the maintenance daemon) is
// tried again a few times.
func dropCitusDB(ctx context.Context, name string) error {
	nodes, err := citusNodes()
	if err != nil {
		return err
	}
	drop := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize() + " WITH (FORCE)"
	var errs []error
	for _, n := range nodes {
		for try := 0; ; try++ {
			err := onNode(ctx, n.port, "postgres", drop)
			var pgErr *pgconn.PgError
			if err != nil && errors.As(err, &pgErr) && pgErr.Code == "55006" && try < 20 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
			}
			break
		}
	}
	return errors.Join(errs...)
}

// TwoPhaseCommits counts the transactions on pool's database that Citus
// committed with two phases and has not yet finished recovering: it keeps
// each in pg_dist_transaction until its recovery (every
// citus.recover_2pc_interval, or RecoverTwoPhase) has seen it committed on
// every worker. Only on Citus.
func TwoPhaseCommits(tb testing.TB, pool *pgxpool.Pool) int {
	tb.Helper()
	var n int
	if err := pool.QueryRow(tb.Context(), `SELECT count(*) FROM pg_dist_transaction`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// RecoverTwoPhase finishes the two-phase commits Citus has recorded on
// pool's database, so that TwoPhaseCommits counts from zero.
func RecoverTwoPhase(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	if _, err := pool.Exec(tb.Context(), `SELECT recover_prepared_transactions()`); err != nil {
		tb.Fatal(err)
	}
	if n := TwoPhaseCommits(tb, pool); n != 0 {
		tb.Fatalf("%d two-phase commits left after recovery", n)
	}
}

// SkipUnlessCitus skips tb unless tests run against a Citus cluster.
func SkipUnlessCitus(tb testing.TB) {
	tb.Helper()
	if !Citus() {
		tb.Skip("needs a Citus cluster (" + CitusDirEnv + ")")
	}
}

// InOnePhase runs writes, on a Citus cluster, and fails tb if Citus
// committed any of them with two phases (TwoPhaseCommits after what came
// before was recovered). It skips tb on plain Postgres, which has no
// second phase.
func InOnePhase(tb testing.TB, pool *pgxpool.Pool, writes func()) {
	tb.Helper()
	SkipUnlessCitus(tb)
	RecoverTwoPhase(tb, pool)
	writes()
	if n := TwoPhaseCommits(tb, pool); n != 0 {
		tb.Errorf("%d writes committed in two phases, want none", n)
	}
}

// LockWaitsSQL answers whether a statement on the test's database waits
// for a lock. On Citus the wait is on a worker, where the coordinator's
// pg_stat_activity does not see it; citus_lock_waits does.
var LockWaitsSQL = func() string {
	if Citus() {
		return `SELECT EXISTS (SELECT 1 FROM citus_lock_waits)`
	}
	return `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`
}()

// Runs says whether statement runs on the database behind pool: it is
// prepared, then executed once with a sample of each parameter's type (a
// tenant-like text, zero, false, now; NULL for other types) inside a
// transaction that is rolled back. On Citus this is what proves a
// statement: Citus refuses what it cannot distribute (SQLSTATE 0A000) when
// it plans the statement at execution, not when Postgres prepares it. An
// error a NULL argument causes by itself (a data exception, class 22, or an
// integrity violation, class 23), or one of tokend's own checks (class TD,
// as tokend_policy_current raises) still counts as running. Samples rather
// than NULLs: with a NULL tenant Citus prunes every shard and may accept
// what it refuses for a real one.
func Runs(tb testing.TB, pool *pgxpool.Pool, statement string) error {
	tb.Helper()
	ctx := tb.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	sd, err := tx.Prepare(ctx, "", statement)
	if err != nil {
		return err
	}
	args := make([]any, len(sd.ParamOIDs))
	for i, oid := range sd.ParamOIDs {
		args[i] = sampleArg(oid)
	}
	rows, err := tx.Query(ctx, statement, args...)
	if err == nil {
		for rows.Next() {
		}
		rows.Close()
		err = rows.Err()
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23") ||
		strings.HasPrefix(pgErr.Code, "TD")) {
		return nil
	}
	return err
}

// sampleArg is a value of the type of oid for Runs.
func sampleArg(oid uint32) any {
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.NameOID:
		return "pgtest"
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID:
		return 0
	case pgtype.Float4OID, pgtype.Float8OID:
		return 0.0
	case pgtype.BoolOID:
		return false
	case pgtype.ByteaOID:
		return []byte{0}
	case pgtype.TimestamptzOID:
		return time.Now()
	case pgtype.JSONBOID, pgtype.JSONOID:
		return "{}"
	case pgtype.TextArrayOID:
		return []string{}
	case pgtype.IntervalOID:
		return time.Second
	}
	return nil
}

// RunsAll reports, as test errors by name, each of statements that does not
// run (see Runs) on a fresh migrated database: the statement tests of every
// package that holds SQL are this one call.
// The database has tokend's schema and, after it, the sets given: a
// program's own tables.
func RunsAll(t *testing.T, statements map[string]string, sets ...migrations.Set) {
	t.Helper()
	pool := NewPoolWith(t, sets...)
	for name, sql := range statements {
		if err := Runs(t, pool, sql); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
