package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestCitusEveryTableDistributed checks, on a Citus cluster
// (TOKEND_TEST_CITUS_DIR), that the migrated schema leaves no table local:
// every table with a tenant_id is distributed by it, co-located with
// tokens, and every other table is a reference table; and that a test
// database copied from the template answers a distributed write and read
// from shards on the workers.
func TestCitusEveryTableDistributed(t *testing.T) {
	if !Citus() {
		t.Skip("no Citus cluster: set " + CitusDirEnv)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	rows, err := conn.Query(ctx, `
		SELECT c.relname,
		       EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped),
		       p.partmethod::text, coalesce(column_to_column_name(p.logicalrelid, p.partkey), ''),
		       p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'tokens'::regclass)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var name, method, column string
		var tenant bool
		var colocated *bool
		if err := rows.Scan(&name, &tenant, &method, &column, &colocated); err != nil {
			t.Fatal(err)
		}
		seen++
		switch {
		case method == "":
			t.Errorf("table %s is local", name)
		case tenant && (method != "h" || column != "tenant_id" || colocated == nil || !*colocated):
			t.Errorf("table %s: method %q by %q, co-located with tokens %v; want hash by tenant_id, co-located", name, method, column, colocated)
		case !tenant && method != "n":
			t.Errorf("table %s has no tenant_id but method %q; want a reference table", name, method)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Fatalf("saw %d tables; the schema has more", seen)
	}

	var workers int
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement JOIN pg_dist_shard USING (shardid) WHERE logicalrelid = 'tokens'::regclass").Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if workers < 2 {
		t.Fatalf("tokens' shards are on %d nodes, want the workers", workers)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO operations (tenant_id, name, mode) SELECT 't' || i, 'x.y', 'lease' FROM generate_series(1, 50) i"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM operations").Scan(&n); err != nil || n != 50 {
		t.Fatalf("read back %d rows (%v), want 50", n, err)
	}
}
