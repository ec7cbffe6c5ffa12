package store

// existingColumns are what a re-issue needs of the token holding an intent,
// the ignored fields it was issued under among them: its fingerprint was
// computed with those. An unresolved token is never forgotten: its outcome
// is still owed to someone.
//
// The state is as of now (StateExpr, spelled out here as the
// package cannot import it): an issued token past its expiry reads expired,
// as every other read says.
const existingColumns = `
SELECT id, subject, CASE WHEN state = 'issued' AND expires_at <= now() THEN 'expired' ELSE state END AS state, generation, payload_digest, created_at, expires_at, retain_until,
       fingerprint, secret_nonce, secret_key_id, ignored_fields,
       retain_until <= now() AND state NOT IN ('pending', 'unknown') AS forgotten
FROM tokens
WHERE tenant_id = $1 AND operation = $2 AND intent_id = $3`

// existingSQL reads the token holding an intent, locking it so a concurrent
// re-issue after retention forgets it only once.
const existingSQL = existingColumns + `
FOR UPDATE`

// replaySQL reads it without a lock, for a request that can only be a
// replay: one the operation's current policy would refuse.
const replaySQL = existingColumns
