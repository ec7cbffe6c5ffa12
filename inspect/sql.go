package inspect

// Columns are a token record's columns, in the order Scan reads them, for
// statements elsewhere that return a token (RETURNING inspect.Columns).
const Columns = `tenant_id, id, operation, intent_id, subject, state, generation,
       operation_id, payload_digest, created_at, expires_at, retain_until,
       lease_expires_at, finished_at, result_status, result_body`

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
const listSQL = `
SELECT ` + Columns + `
FROM tokens
WHERE tenant_id = $1
  AND ($2::text IS NULL OR state = $2)
  AND ($3::text IS NULL OR operation = $3)
  AND ($4::text IS NULL OR subject = $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($7::text IS NULL OR id < $7)
ORDER BY id DESC
LIMIT $8`
