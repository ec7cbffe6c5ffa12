package intent

// insertSQL claims an intent and records the issue event in one statement,
// provided the policy the candidate was built under ($14, its Version) is
// still the operation's: policies come from an in-process cache. The token
// keeps a copy of that policy ($12, $15 to $19), which is what its spends,
// lease grants and replays go by. It returns one row: whether the policy was
// current, and the times when a token was inserted (NULL when the intent was
// taken or the policy changed).
// Times come from the database clock so every instance agrees on them.
//
// The declaration's row is locked FOR KEY SHARE until the issue commits:
// that does not wait for redeclarations (an update of non-key columns), but
// makes a concurrent operation.Delete wait and then see this token, so no
// token outlives its declaration unfinished. A built-in operation without a
// row has nothing to lock and cannot be deleted.
const insertSQL = `
WITH pol AS (
    SELECT coalesce((SELECT version FROM operations WHERE tenant_id = $1 AND name = $3 FOR KEY SHARE), 0) = $14 AS current
), ins AS (
    INSERT INTO tokens (tenant_id, id, operation, intent_id, subject,
                        secret_hash, secret_nonce, secret_key_id, fingerprint, payload_digest,
                        ttl_seconds, retention_seconds, state, expires_at, retain_until,
                        mode, on_lease_expiry, lease_seconds, ignored_fields, event_outcome)
    SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::integer, $12::integer, 'issued',
           now() + make_interval(secs => $11::integer),
           now() + make_interval(secs => $11::integer + $12::integer),
           $15, $16, $17, $18, $19
    FROM pol WHERE pol.current
    ON CONFLICT (tenant_id, operation, intent_id) DO NOTHING
    RETURNING tenant_id, id, operation, subject, created_at, expires_at, retain_until
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $13, 'issued', NULL, 'issued', 0 FROM ins
)
SELECT pol.current, ins.created_at, ins.expires_at, ins.retain_until FROM pol LEFT JOIN ins ON true`

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

// existingSQL reads the token holding an intent, locking it so a concurrent
// re-issue after retention forgets it only once.
const existingSQL = existingColumns + `
FOR UPDATE`

// replaySQL reads it without a lock, for a request that can only be a
// replay: one the operation's current policy would refuse.
const replaySQL = existingColumns

// forgetSQL purges a token whose intent retention has passed.
const forgetSQL = `
WITH del AS (
    DELETE FROM tokens WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, state, generation
)
INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, operation, subject, $3, 'purged', state, 'purged', generation FROM del`
