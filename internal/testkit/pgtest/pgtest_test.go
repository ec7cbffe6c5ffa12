package pgtest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestNewURLClonesMigratedTemplate checks that each database is migrated to
// the newest version, and that two databases are separate.
func TestNewURLClonesMigratedTemplate(t *testing.T) {
	ctx := context.Background()
	a, b := NewURL(t), NewURL(t)
	if a == b {
		t.Fatalf("two tests got one database: %s", a)
	}
	connA, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer connA.Close(ctx)
	connB, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer connB.Close(ctx)

	var version, files int
	if err := connA.QueryRow(ctx, "SELECT version FROM tokend_schema_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if files = countMigrations(t); version != files {
		t.Fatalf("schema version %d, want %d (one per migration file)", version, files)
	}
	if _, err := connA.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var seen bool
	if err := connB.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if seen {
		t.Fatal("a table created in one test database is visible in another")
	}
	// Commits of a test database do not wait for the disk (asyncCommits).
	var sc string
	if err := connA.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil {
		t.Fatal(err)
	}
	if want := "off"; !Citus() && sc != want {
		t.Errorf("synchronous_commit = %s in a test database, want %s", sc, want)
	}
}

func countMigrations(t *testing.T) int {
	names, err := filepath.Glob("../../../migrations/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migration files found: %v", err)
	}
	return len(names)
}
