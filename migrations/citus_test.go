package migrations_test

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
)

// TestLaterMigrationOnDistributedSchema applies a migration after the
// schema is distributed: several statements in one file, DDL on a
// distributed table (what Citus refuses when the file arrives as one
// string), and a new tenant table that the file distributes as 012 does.
// On plain Postgres the same file applies too.
func TestLaterMigrationOnDistributedSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	set := fstest.MapFS{}
	names, _ := fs.Glob(migrations.Schema.Files, "*.sql")
	var citusBlock []byte
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.Schema.Files, n)
		set[n] = &fstest.MapFile{Data: b}
		if strings.HasSuffix(n, "_citus.sql") {
			citusBlock = b
		}
	}
	next := later(len(names) + 1)
	set[next] = &fstest.MapFile{Data: append([]byte(`
ALTER TABLE tokens ADD COLUMN later_note text;
ALTER TABLE tokens ADD CONSTRAINT later_note_short CHECK (length(later_note) < 100);
CREATE INDEX tokens_later ON tokens (tenant_id, later_note);
CREATE TABLE later_things (tenant_id text NOT NULL, id bigint NOT NULL, PRIMARY KEY (tenant_id, id));
`), citusBlock...)}
	n, err := migrations.Set{Files: set, VersionTable: migrations.VersionTable}.Apply(ctx, conn)
	if err != nil || n != 1 {
		t.Fatalf("applied %d, %v; want the one later migration", n, err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO later_things VALUES ('t1', 1)"); err != nil {
		t.Fatal(err)
	}
	if pgtest.Citus() {
		var local int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = current_schema() AND c.relkind = 'r'
			  AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = c.oid)`).Scan(&local); err != nil || local != 0 {
			t.Fatalf("%d local tables (%v) after a later migration, want none", local, err)
		}
	}
}

func later(n int) string {
	return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)}) + "_later.sql"
}
