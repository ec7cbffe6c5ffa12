// Package pgtest hands each test a fresh, migrated Postgres database, so tests
// and packages run in parallel without seeing each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/tokend/tokend/migrations"
)

// schema is the schema of every test database: tokend's, then the sets a
// caller adds (NewURLWith), such as a demo business's tables.
func schema(extra []migrations.Set) []migrations.Set {
	return append([]migrations.Set{migrations.Schema}, extra...)
}

// DefaultAdminURL is used when TOKEND_TEST_DATABASE_URL is unset; it matches a
// local server with trust auth, the set-up scripts/test provides.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if nodes, _ := citusNodes(); nodes != nil {
		return nodeURL(nodes[0].port, "postgres")
	}
	if u := os.Getenv("TOKEND_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// NewURL creates a database migrated to tokend's schema for t, dropped
// when t ends, and returns its connection URL. The database is a copy of a
// template migrated once per schema (see ensureTemplate), which costs a
// fraction of migrating each time.
func NewURL(t testing.TB) string {
	t.Helper()
	return NewURLWith(t)
}

// NewURLWith is NewURL with sets applied after tokend's schema.
func NewURLWith(t testing.TB, sets ...migrations.Set) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tmpl, err := templateName(schema(sets))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("pgtest: connect to %s (set TOKEND_TEST_DATABASE_URL, or run scripts/test): %v", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)

	name := "tokend_test_" + randomSuffix()
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	if Citus() {
		err = onNodes(ctx, create)
	} else if _, err = admin.Exec(ctx, create); err == nil {
		err = asyncCommits(ctx, admin, name)
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, name) })
	return urlFor(name)
}

// asyncCommits makes a commit in database name return before its WAL is
// flushed, as the throwaway clusters of scripts/test and internal/faults
// do for the whole server: a test database outlives no crash of the
// server, so durability buys nothing, and on a reused server with fsync on
// every commit would wait for the disk. What other sessions see, and when,
// is unchanged.
func asyncCommits(ctx context.Context, admin *pgx.Conn, name string) error {
	_, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET synchronous_commit = off")
	return err
}

// NewEmptyURL creates a database with no schema at all for t, dropped when
// t ends, and returns its connection URL: for tests of migrations.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("pgtest: connect to %s (set TOKEND_TEST_DATABASE_URL, or run scripts/test): %v", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)
	name := "tokend_test_" + randomSuffix()
	if Citus() {
		err = createCitusDB(ctx, name)
	} else if _, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err == nil {
		err = asyncCommits(ctx, admin, name)
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, name) })
	return urlFor(name)
}

// templates holds the per-process answers of ensureTemplate, one per
// schema: the first test of a package pays for it, the others clone.
var templates sync.Map // version tables joined → func() (string, error)

func templateName(sets []migrations.Set) (string, error) {
	key := ""
	for _, s := range sets {
		key += s.VersionTable + "\x00"
	}
	f, _ := templates.LoadOrStore(key, sync.OnceValues(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return ensureTemplate(ctx, sets)
	}))
	return f.(func() (string, error))()
}

// ensureTemplate returns the name of a database migrated to exactly the
// embedded schema, creating it if no earlier run did. The name carries a hash
// of the migration files, so a branch with other migrations gets its own
// template and a schema change never reuses a stale one. Test packages run as
// parallel processes: an advisory lock lets one build while the others wait,
// and a template appears under its final name only once fully migrated, so a
// run killed midway leaves nothing half-built behind that name.
func ensureTemplate(ctx context.Context, sets []migrations.Set) (string, error) {
	if _, err := citusNodes(); err != nil {
		return "", err
	}
	h := sha256.New()
	for _, set := range sets {
		sum, err := set.Checksum()
		if err != nil {
			return "", err
		}
		h.Write([]byte(sum))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	name := "tokend_tmpl_" + sum[:16]
	if Citus() {
		name = "tokend_ctmpl_" + sum[:15]
	}

	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s (set TOKEND_TEST_DATABASE_URL, or run scripts/test): %w", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	// Closing the connection releases the lock too; unlocking first lets the
	// waiting packages go without waiting for the close.
	defer func() { _, _ = admin.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", name) }()

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_b" + randomSuffix()
	if Citus() {
		if err := createCitusDB(ctx, building); err != nil {
			_ = dropCitusDB(ctx, building)
			return "", fmt.Errorf("create template: %w", err)
		}
		if _, err := migrations.ApplyURLCount(ctx, urlFor(building), sets...); err != nil {
			_ = dropCitusDB(ctx, building)
			return "", err
		}
		if err := sealCitusTemplate(ctx, building, name); err != nil {
			_ = dropCitusDB(ctx, building)
			return "", fmt.Errorf("name template: %w", err)
		}
		return name, nil
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	if _, err := migrations.ApplyURLCount(ctx, urlFor(building), sets...); err != nil {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)")
		return "", err
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("name template: %w", err)
	}
	return name, nil
}

func dropDatabase(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if Citus() {
		if err := dropCitusDB(ctx, name); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
		return
	}
	c, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Logf("pgtest: drop %s: %v", name, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("pgtest: drop %s: %v", name, err)
	}
}

// urlFor is AdminURL with its database replaced by name.
func urlFor(name string) string {
	u, err := url.Parse(AdminURL())
	if err != nil {
		// AdminURL was already used to connect, so it parses.
		panic(fmt.Sprintf("pgtest: admin url: %v", err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewPool creates a database migrated to tokend's schema for t and returns
// a pool on it, closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPoolWith(t)
}

// NewPoolWith is NewPool with sets applied after tokend's schema.
func NewPoolWith(t testing.TB, sets ...migrations.Set) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURLWith(t, sets...))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// MigrateTo brings the database behind conn to version of tokend's own
// schema and no further: for tests of an upgrade from an older schema.
func MigrateTo(tb testing.TB, conn *pgx.Conn, version int32) {
	tb.Helper()
	m, err := migrate.NewMigrator(tb.Context(), conn, migrations.VersionTable)
	if err != nil {
		tb.Fatal(err)
	}
	if err := m.LoadMigrations(migrations.Schema.Files); err != nil {
		tb.Fatal(err)
	}
	if err := m.MigrateTo(tb.Context(), version); err != nil {
		tb.Fatal(err)
	}
}

// ConnAt connects to a new empty database brought to version of tokend's
// own schema (MigrateTo), closed when tb ends, and answers it with its URL:
// the start of every test of an upgrade.
func ConnAt(tb testing.TB, version int32) (*pgx.Conn, string) {
	tb.Helper()
	url := NewEmptyURL(tb)
	conn, err := pgx.Connect(tb.Context(), url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	MigrateTo(tb, conn, version)
	return conn, url
}
