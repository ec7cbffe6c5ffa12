package inspect

import "fmt"

// StateExpr is a token's state as of the database's now(): an issued token
// whose expiry has passed is expired, whether or not the sweeper has recorded
// it yet (the sweep's store.SweepExpire makes the same verdict durable, by
// the same clock). Every read of a token's state goes through it, so that no read says
// issued while a spend says token_expired. It names the tokens table's
// columns unqualified.
const StateExpr = `CASE WHEN state = 'issued' AND expires_at <= now() THEN 'expired' ELSE state END`

// finishedExpr is when a token finished, as of the database's now(): an
// expired token finished when it expired, which is what the sweeper records,
// so a record reads the same before and after the sweep.
const finishedExpr = `CASE WHEN state = 'issued' AND expires_at <= now() THEN expires_at ELSE finished_at END`

// Columns are a token record's columns, in the order Scan reads them, for
// statements elsewhere that return a token (RETURNING inspect.Columns). The
// state and finish time are as of the database's now() (StateExpr).
const Columns = `tenant_id, id, operation, intent_id, subject, ` + StateExpr + ` AS state, generation,
       operation_id, payload_digest, created_at, expires_at, retain_until,
       lease_expires_at, ` + finishedExpr + ` AS finished_at, result_status, result_body`

const getSQL = `SELECT ` + Columns + ` FROM tokens WHERE tenant_id = $1 AND id = $2`

const eventsSQL = `
SELECT seq, at, actor, kind, from_state, to_state, generation, detail
FROM token_events
WHERE tenant_id = $1 AND token_id = $2
ORDER BY seq`

// listSQL is the list of a tenant's tokens, one statement per kind of state
// filter, all rendered from listText. The other filters are in every
// variant: a NULL argument leaves its filter out. An index on (tenant_id,
// ..., id) serves the order and the keyset condition: a page walks the
// tenant's tokens back from the cursor until it is full.
//
// The state filter is not such an OR: under a generic plan (a prepared
// statement past five executions, or plan_cache_mode=force_generic_plan)
// "$2 IS NULL OR state = $2" cannot use the (tenant_id, state, id) index,
// and listing the 10 unknown tokens among 2 million walked them all for a
// second. Each variant names its state condition, so that even a generic
// plan walks that index and stops at a full page (TestListWalksOnlyItsState). The conditions are
// StateExpr on the stored columns: issued is stored issued and not yet past
// expiry; expired is stored expired, or stored issued and past expiry, two
// index ranges merged.
var listSQL = map[stateFilter]string{
	anyState:    fmt.Sprintf(listText, "$2::text IS NULL"),
	storedState: fmt.Sprintf(listText, "state = $2::text"),
	// $2 is 'issued': a constant would let the planner pick the partial
	// index on expiry and sort every issued token.
	issuedState: fmt.Sprintf(listText, "state = $2::text AND expires_at > now()"),
	// $2 is 'expired'.
	expiredState: `SELECT * FROM ((` + fmt.Sprintf(listText, "state = $2::text") + `) UNION ALL (` +
		fmt.Sprintf(listText, "state = 'issued' AND expires_at <= now()") + `)) AS expired ORDER BY id DESC LIMIT $8`,
}

// stateFilter is which variant of listSQL a filter's state takes.
type stateFilter int

const (
	anyState     stateFilter = iota // no state filter
	storedState                     // a state stored as it reads
	issuedState                     // issued, and not past expiry
	expiredState                    // expired, or issued past expiry
)

// listText is a page of listSQL with its state condition left as %s.
const listText = `
SELECT ` + Columns + `
FROM tokens
WHERE tenant_id = $1
  AND %s
  AND ($3::text IS NULL OR operation = $3)
  AND ($4::text IS NULL OR subject = $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($7::text IS NULL OR id < $7)
ORDER BY id DESC
LIMIT $8`
