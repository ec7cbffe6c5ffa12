package store

// SetLockTimeoutSQL bounds, for the rest of the transaction, how long a
// spend waits for a token another spend holds.
const SetLockTimeoutSQL = `SELECT set_config('lock_timeout', $1, true)`

// LockSQL reads a token by its secret hash under a row lock, with the policy
// it was issued under (never its operation's current one, which may have
// been redeclared or deleted since). Expiry and lease end are judged by the
// database clock.
const LockSQL = `
SELECT id, operation, subject, secret_key_id, state, generation, payload_digest,
       expires_at <= now(),
       result_status, result_body, operation_id,
       coalesce(lease_expires_at <= now(), false),
       ceil(extract(epoch FROM lease_expires_at - now()))::integer,
       mode, on_lease_expiry, lease_seconds, ignored_fields
FROM tokens
WHERE tenant_id = $1 AND secret_hash = $2
FOR UPDATE`

// ReportStateSQL tells why a report changed nothing: the token's standing,
// whether it was ever leased (the first lease sets operation_id, and nothing
// clears it), and which holder's report, if any, was recorded for the quoted
// generation. Each generation is granted once, so there is at most one.
const ReportStateSQL = `
SELECT t.state, t.generation, t.result_status, t.result_body, t.operation_id IS NOT NULL,
       (SELECT e.kind FROM token_events e
        WHERE e.tenant_id = t.tenant_id AND e.token_id = t.id AND e.generation = $3
          AND e.kind IN ('complete', 'fail', 'report_unknown')
        ORDER BY e.seq LIMIT 1)
FROM tokens t
WHERE t.tenant_id = $1 AND t.id = $2`
