package inspect

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

// listSQL is one statement for every combination of filters: a NULL argument
// leaves its filter out. Whatever the plan, the (tenant_id, id) primary key
// serves the order and the keyset condition: a page walks the tenant's tokens
// back from the cursor until it is full.
//
// The state filter selects by StateExpr, written out on the stored columns so
// that the (tenant_id, state, id) index still applies: issued is stored
// issued and not yet past expiry; expired is stored expired, or stored issued
// and past expiry. With the filter's value known when the statement is
// planned, the CASE folds to its one branch.
const listSQL = `
SELECT ` + Columns + `
FROM tokens
WHERE tenant_id = $1
  AND ($2::text IS NULL OR CASE $2::text
        WHEN 'issued'  THEN state = 'issued' AND expires_at > now()
        WHEN 'expired' THEN state IN ('issued', 'expired') AND (state = 'expired' OR expires_at <= now())
        ELSE state = $2::text
      END)
  AND ($3::text IS NULL OR operation = $3)
  AND ($4::text IS NULL OR subject = $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($7::text IS NULL OR id < $7)
ORDER BY id DESC
LIMIT $8`
