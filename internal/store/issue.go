package store

// existingColumns are what a re-issue needs of the token holding an intent,
// the ignored fields it was issued under among them: its fingerprint was
// computed with those. An unresolved token is never forgotten: its outcome
// is still owed to someone.
const existingColumns = `
SELECT id, subject, state, generation, payload_digest, created_at, expires_at, retain_until,
       fingerprint, secret_nonce, secret_key_id, ignored_fields,
       retain_until <= now() AND state NOT IN ('pending', 'unknown') AS forgotten
FROM tokens
WHERE tenant_id = $1 AND operation = $2 AND intent_id = $3`

// ExistingSQL reads the token holding an intent, locking it so a concurrent
// re-issue after retention forgets it only once.
const ExistingSQL = existingColumns + `
FOR UPDATE`

// ReplaySQL reads it without a lock, for a request that can only be a
// replay: one the operation's current policy would refuse.
const ReplaySQL = existingColumns
