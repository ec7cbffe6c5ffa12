package store

import (
	"fmt"

	"github.com/tokend/tokend/token"
)

// StateExpr is a token's state as of the database's now(): an issued token
// whose expiry has passed is expired, whether or not the sweeper has
// recorded it yet (SweepExpire makes the same verdict durable, by the same
// clock). Every read of a token's state goes through it, so that no read
// says issued while a spend says token_expired. It names the tokens table's
// columns unqualified. inspect.StateExpr is this.
const StateExpr = `CASE WHEN state = 'issued' AND expires_at <= now() THEN 'expired' ELSE state END`

// finishedExpr is when a token finished, as of the database's now(): an
// expired token finished when it expired, which is what the sweeper records,
// so a record reads the same before and after the sweep.
const finishedExpr = `CASE WHEN state = 'issued' AND expires_at <= now() THEN expires_at ELSE finished_at END`

// Columns are a token record's columns, in the order ScanRecord reads them,
// for every statement that returns a token (RETURNING Columns). The state
// and finish time are as of the database's now() (StateExpr).
// inspect.Columns is this.
const Columns = `tenant_id, id, operation, intent_id, subject, ` + StateExpr + ` AS state, generation,
       operation_id, payload_digest, created_at, expires_at, retain_until,
       lease_expires_at, ` + finishedExpr + ` AS finished_at, result_status, result_body`

// expiringExpr, read after Columns by getSQL and listSQL, is true for a
// row that reads expired (StateExpr) while it is stored issued, in a
// transaction that may write: the read records the expiry (expireReadSQL)
// and reads the row again before it answers. Deriving expired from the row
// alone is not enough: a spend or revoke that judged the token unexpired
// may hold its lock and commit after the read answered, and no single order
// would explain expired followed by consumed (docs/robustness.md, track
// record #2). A read-only transaction cannot record it and answers as the
// row reads.
const expiringExpr = `state = 'issued' AND expires_at <= now() AND current_setting('transaction_read_only') = 'off'`

// getSQL reads tenant $1's token $2, then expiringExpr.
const getSQL = `SELECT ` + Columns + `, ` + expiringExpr + ` FROM tokens WHERE tenant_id = $1 AND id = $2`

// rereadSQL reads tenant $1's tokens $2 again, after expireReadSQL.
const rereadSQL = `SELECT ` + Columns + ` FROM tokens WHERE tenant_id = $1 AND id = ANY($2::text[])`

// eventsSQL reads the audit trail of tenant $1's token $2, oldest first.
const eventsSQL = `
SELECT seq, at, actor, kind, from_state, to_state, generation, detail
FROM token_events
WHERE tenant_id = $1 AND token_id = $2
ORDER BY seq`

// listSQL is the list of a tenant's tokens: one statement per state filter
// ("" for none), rendered at init from listText. The other filters are in
// every statement: a NULL argument leaves its filter out. An index on
// (tenant_id, ..., id) serves the order and the keyset condition: a page
// walks the tenant's tokens back from the cursor until it is full.
//
// The state is no such OR. Under a generic plan (a prepared statement past
// five executions, or plan_cache_mode=force_generic_plan), "$2 IS NULL OR
// state = $2" kept the state's index out, and even "state = $2" reads to
// the planner as a state of average frequency: listing the 5 unknown
// tokens among 2 million walked them all (over a second). So each state's
// statement names it as a constant, one of token.States (a request only
// picks the statement), and even a generic plan knows it is rare
// (TestListWalksOnlyItsState, BenchmarkListRareState). The conditions are
// StateExpr on the stored columns: expired is stored expired, or stored
// issued and past expiry, two index ranges merged.
//
// Issued alone stays a parameter ($2 is 'issued'): issued tokens are
// usually the many, and a constant would let a generic plan take the
// partial index on expiry and sort every issued token.
var listSQL = listStatements()

func listStatements() map[token.State]string {
	m := map[token.State]string{"": fmt.Sprintf(listText, "$2::text IS NULL")}
	for _, st := range token.States {
		is := fmt.Sprintf("state = '%s' AND $2::text IS NOT NULL", st)
		switch st {
		case token.Issued:
			m[st] = fmt.Sprintf(listText, "state = $2::text AND expires_at > now()")
		case token.Expired:
			m[st] = `SELECT * FROM ((` + fmt.Sprintf(listText, is) + `) UNION ALL (` +
				fmt.Sprintf(listText, "state = 'issued' AND expires_at <= now() AND $2::text IS NOT NULL") +
				`)) AS expired ORDER BY id DESC LIMIT $8`
		default:
			m[st] = fmt.Sprintf(listText, is)
		}
	}
	return m
}

// listText is a page of listSQL with its state condition left as %s. Each
// row ends with expiringExpr.
const listText = `
SELECT ` + Columns + `, ` + expiringExpr + ` AS expiring
FROM tokens
WHERE tenant_id = $1
  AND %s
  AND ($3::text IS NULL OR operation = $3)
  AND ($4::text IS NULL OR subject = $4)
  AND ($9::text IS NULL OR subject = $9 OR intent_id = $9)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($7::text IS NULL OR id < $7)
ORDER BY id DESC
LIMIT $8`
