package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/token"
)

// TestPointStatementsStayFlatAsTokensGrow (issue 43): on a fresh database,
// each statement that reads or changes one token (or one API key or policy)
// runs eight times through pgx's statement cache while tokens and
// token_events hold a handful of rows, never analyzed, as a new deployment
// has them; a prepared statement settles on its generic plan at the sixth
// execution and keeps it until the table is analyzed. The tables then grow
// to 20,000 tokens of one tenant and 200 of another, with their events,
// and each statement, through the same prepared statement, must touch
// about as many buffers per call as it did on the tiny tables: a plan that
// walks the tenant's tokens (an index leading with tenant_id taken for a
// lookup it cannot narrow) touches hundreds. Buffers are counts, not
// times. Autovacuum is off for the two tables, so that no ANALYZE replans
// the statements midway, as none did in the fresh deployment of the issue.
func TestPointStatementsStayFlatAsTokensGrow(t *testing.T) {
	t.Parallel()
	if pgtest.Citus() {
		t.Skip("on Citus a statement's plan is the coordinator's custom scan; the workers plan the shards")
	}
	ctx := context.Background()
	conn, run := planConn(ctx, t, ledgertest.NewPool(t))
	run(`ALTER TABLE tokens SET (autovacuum_enabled = false)`)
	run(`ALTER TABLE token_events SET (autovacuum_enabled = false)`)
	run(`INSERT INTO api_keys (tenant_id, id, key_hash, role) VALUES ('big', 'key-1', '\x01', 'client')`)
	run(`INSERT INTO api_key_routes (key_hash, key_tenant) VALUES ('\x01', 'big')`)
	load := func(tenant string, from, to int) {
		t.Helper()
		run(loadTokensSQL, tenant, from, to)
		run(loadEventsSQL, tenant, fmt.Sprintf("tok_%08d", from), fmt.Sprintf("tok_%08d", to))
	}
	load("big", 1, 3)
	load("small", 1, 1)

	const tenant, id, op = "big", "tok_00000002", "ledger.credit"
	hash := secretHash(tenant, 2)
	const tid = int64(7)
	cases := []struct {
		name string
		sql  string
		args []any
	}{
		{"issue", store.Statements().IssueSQL, []any{tenant, "tok_new", op, "intent-new", "user-1", []byte{1}, []byte{2}, "k1",
			[]byte{3}, []byte{4}, 3600, 86400, "atomic", "unknown", 30, []string{}, false}},
		{"issue event", store.Statements().IssueEventSQL, []any{tenant, id, "test"}},
		{"policy current", store.Statements().PolicyCurrentSQL, []any{tenant, op, 0}},
		{"existing", store.Statements().ExistingSQL, []any{tenant, op, "intent-2"}},
		{"replay", store.Statements().ReplaySQL, []any{tenant, op, "intent-2"}},
		{"lock", store.Statements().LockSQL, []any{tenant, hash}},
		{"lock bounded", store.Statements().LockBoundedSQL, []any{tenant, hash, "1000"}},
		{"lock state", store.Statements().LockStateSQL, []any{tenant, id}},
		{"report state", store.Statements().ReportStateSQL, []any{tenant, id, 1}},
		{"get", store.Statements().GetSQL, []any{tenant, id}},
		{"events", store.Statements().EventsSQL, []any{tenant, id}},
		{"forget event", store.Statements().ForgetEventSQL, []any{tenant, id, "test"}},
		{"forget", store.Statements().ForgetSQL, []any{tenant, id}},
		{"finish", store.Statements().FinishSQL.Change, []any{tenant, id, "consumed", 200, []byte("{}"), tid}},
		{"lapse", store.Statements().LapseSQL.Change, []any{tenant, id, tid}},
		{"lease", store.Statements().LeaseSQL.Change, []any{tenant, id, 30, "op-1", tid}},
		{"finish lease", store.Statements().FinishLeaseSQL.Change, []any{tenant, id, 1, "consumed", 200, []byte("{}"), tid}},
		{"report unknown", store.Statements().ReportUnknownSQL.Change, []any{tenant, id, 1, tid}},
		{"revoke", store.Statements().RevokeSQL.Change, []any{tenant, id, tid}},
		{"reconcile outcome", store.Statements().ReconcileOutcomeSQL.Change, []any{tenant, id, "consumed", 200, []byte("{}"), tid}},
		{"reconcile not executed", store.Statements().ReconcileNotExecutedSQL.Change, []any{tenant, id, tid}},
		{"api key route", store.Statements().APIKeyRouteSQL, []any{[]byte{1}}},
		{"api key resolve", store.Statements().APIKeyResolveSQL, []any{tenant, []byte{1}}},
		{"api key live", store.Statements().APIKeyLiveSQL, []any{tenant, "key-1"}},
		{"policy get", store.Statements().PolicyGetSQL, []any{tenant, op}},
		{"list", store.Statements().ListSQL[""], []any{tenant, nil, nil, nil, nil, nil, nil, 10, nil}},
		{"list unknown", store.Statements().ListSQL[token.Unknown], []any{tenant, "unknown", nil, nil, nil, nil, nil, 10, nil}},
	}
	steps := map[string]store.Step{
		"finish": store.Statements().FinishSQL, "lapse": store.Statements().LapseSQL, "lease": store.Statements().LeaseSQL, "finish lease": store.Statements().FinishLeaseSQL,
		"report unknown": store.Statements().ReportUnknownSQL, "revoke": store.Statements().RevokeSQL, "reconcile outcome": store.Statements().ReconcileOutcomeSQL,
		"reconcile not executed": store.Statements().ReconcileNotExecutedSQL,
	}
	for name, s := range steps {
		args := []any{tenant, id, tid, "test", "finish", "issued"}
		if name == "revoke" {
			args = append(args, "no reason")
		}
		cases = append(cases, struct {
			name string
			sql  string
			args []any
		}{name + " record", s.Record, args})
	}

	for _, c := range cases {
		settlePlan(ctx, t, conn, c.name, c.sql, c.args)
	}
	tiny := make([]int, len(cases))
	for i, c := range cases {
		tiny[i] = buffersPerCall(ctx, t, conn, c.name, c.sql, c.args)
	}
	// The issue's instance: its event insert is on a generic plan by now.
	var generic int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans FROM pg_prepared_statements WHERE statement = $1`,
		store.Statements().IssueEventSQL).Scan(&generic); err != nil || generic == 0 {
		t.Fatalf("the issue's event insert made %d generic plans (%v): the test does not test what it says", generic, err)
	}

	load("big", 4, 20000)
	load("small", 2, 200)
	for i, c := range cases {
		got := buffersPerCall(ctx, t, conn, c.name, c.sql, c.args)
		// An index grows a level or two; a walk of the tenant's tokens
		// touches hundreds of pages.
		if limit := 2*tiny[i] + 8; got > limit {
			t.Errorf("%s: %d buffers per call at 20,000 tokens, %d on the tiny tables (at most %d)", c.name, got, tiny[i], limit)
		} else {
			t.Logf("%s: %d buffers per call, %d on the tiny tables", c.name, got, tiny[i])
		}
	}
}

// loadTokensSQL inserts tokens $2 to $3 of tenant $1, issued, with ids
// tok_<n, 8 digits>, intents intent-<n> and secret hashes secretHash.
const loadTokensSQL = `
INSERT INTO tokens (tenant_id, id, operation, intent_id, subject,
                    secret_hash, secret_nonce, secret_key_id, fingerprint,
                    ttl_seconds, retention_seconds, state, expires_at, retain_until)
SELECT $1, format('tok_%s', lpad(n::text, 8, '0')), 'ledger.credit', 'intent-' || n, 'user-' || n % 100,
       sha256(convert_to($1 || '/' || n, 'UTF8')), '\x00', 'k1', '\x00',
       3600, 86400, 'issued', now() + interval '1 hour', now() + interval '25 hours'
FROM generate_series($2::integer, $3::integer) AS n`

// loadEventsSQL records two events of each of tenant $1's tokens from id $2
// to $3.
const loadEventsSQL = `
INSERT INTO token_events (seq, tenant_id, token_id, operation, subject, actor, kind, to_state, generation)
OVERRIDING SYSTEM VALUE
SELECT 0, tenant_id, id, operation, subject, 'test', kind, 'issued', 0
FROM tokens, (VALUES ('issued'), ('touched')) AS k(kind)
WHERE tenant_id = $1 AND id BETWEEN $2 AND $3`

// secretHash is loadTokensSQL's secret hash of token n of tenant.
func secretHash(tenant string, n int) []byte {
	h := sha256.Sum256([]byte(tenant + "/" + strconv.Itoa(n)))
	return h[:]
}

// planConn acquires one of pool's connections for a plan test (prepared
// statements are per connection), released at the test's end, and a run
// that executes on it or fails the test.
func planConn(ctx context.Context, t *testing.T, pool *pgxpool.Pool) (*pgx.Conn, func(sql string, args ...any)) {
	t.Helper()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Release)
	conn := pc.Conn()
	return conn, func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
}

// settlePlan runs sql with args eight times on conn through pgx's
// statement cache, so that its prepared statement has settled on the
// generic plan it keeps; each in a transaction rolled back, so that the
// tables change only by the test's loads.
func settlePlan(ctx context.Context, t *testing.T, conn *pgx.Conn, name, sql string, args []any) {
	t.Helper()
	for range 8 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// explainPrepared runs sql's prepared statement on conn (the one pgx's
// cache made) with args under EXPLAIN (ANALYZE, BUFFERS, options), in a
// transaction rolled back, and answers the plan's lines.
func explainPrepared(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, args []any, options string) ([]string, error) {
	t.Helper()
	var stmt string
	if err := conn.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, sql).Scan(&stmt); err != nil {
		return nil, fmt.Errorf("its prepared statement: %w", err)
	}
	lits := make([]string, len(args))
	for i, a := range args {
		lits[i] = literal(t, a)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	rows, err := tx.Query(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS%s) EXECUTE %s(%s)", options, stmt, strings.Join(lits, ", ")),
		pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// buffersPerCall answers the shared buffers sql's prepared statement on
// conn hit or read, run with args (explainPrepared).
func buffersPerCall(ctx context.Context, t *testing.T, conn *pgx.Conn, name, sql string, args []any) int {
	t.Helper()
	out, err := explainPrepared(ctx, t, conn, sql, args, ", FORMAT JSON")
	if err != nil || len(out) != 1 {
		t.Fatalf("%s: %v", name, err)
	}
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal([]byte(out[0]), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("%s: plan %s: %v", name, out[0], err)
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}

// literal renders a as an SQL literal for EXECUTE.
func literal(t *testing.T, a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []byte:
		return `'\x` + hex.EncodeToString(v) + `'`
	case int:
		return strconv.Itoa(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []string:
		if len(v) == 0 {
			return "'{}'"
		}
	}
	t.Fatalf("no literal for %T", a)
	return ""
}
