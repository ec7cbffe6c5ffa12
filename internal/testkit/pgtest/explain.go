package pgtest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PlanModes are the plan_cache_mode settings a plan test runs under: the
// plan made for the arguments at hand, and the generic one a prepared
// statement may settle on after five executions.
var PlanModes = []string{"force_custom_plan", "force_generic_plan"}

// Explain prepares statement on one of pool's connections under
// plan_cache_mode mode, runs it with args (SQL literals, as EXECUTE takes
// them; empty for none) under EXPLAIN ANALYZE, and answers how many rows
// its scans read (passed on or removed by a filter) and how many rows it
// returned.
//
// On a Citus cluster (Citus) the test is skipped: the coordinator's plan is
// a custom scan that hides the workers' rows, so there is nothing to count.
func Explain(tb testing.TB, pool *pgxpool.Pool, mode, statement, args string) (read, returned int) {
	tb.Helper()
	if Citus() {
		tb.Skip("pgtest.Explain: plans on Citus are the coordinator's custom scans; the plan tests run on plain Postgres")
	}
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Release()
	for _, sql := range []string{"SET plan_cache_mode = " + mode, "PREPARE explained AS " + statement} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
	}
	// The connection goes back to the pool, for the next case.
	defer conn.Exec(ctx, "DEALLOCATE explained; RESET plan_cache_mode") //nolint:errcheck
	execute := "EXECUTE explained"
	if args != "" {
		execute += "(" + args + ")"
	}
	var out []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+execute).Scan(&out); err != nil {
		tb.Fatal(err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		tb.Fatalf("plan %s: %v", out, err)
	}
	return plans[0].Plan.read(), plans[0].Plan.Rows
}

type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Rows     int        `json:"Actual Rows"`
	Loops    int        `json:"Actual Loops"`
	Removed  int        `json:"Rows Removed by Filter"`
	Plans    []planNode `json:"Plans"`
}

// read sums the rows the scans of tables and indexes under n read: those
// they passed on and those their filters removed. A scan of a CTE's or a
// subquery's rows reads no table and is not counted.
func (n planNode) read() int {
	r := 0
	if strings.HasSuffix(n.Type, "Scan") && n.Relation != "" {
		r = (n.Rows + n.Removed) * max(n.Loops, 1)
	}
	for _, c := range n.Plans {
		r += c.read()
	}
	return r
}
