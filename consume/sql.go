package consume

const setLockTimeoutSQL = `SELECT set_config('lock_timeout', $1, true)`

// lockSQL reads a token by its secret hash under a row lock, with the policy
// it was issued under (never its operation's current one, which may have
// been redeclared or deleted since). Expiry and lease end are judged by the
// database clock.
const lockSQL = `
SELECT id, operation, subject, secret_key_id, state, generation, payload_digest,
       expires_at <= now(),
       result_status, result_body, operation_id,
       coalesce(lease_expires_at <= now(), false),
       ceil(extract(epoch FROM lease_expires_at - now()))::integer,
       mode, on_lease_expiry, lease_seconds, ignored_fields
FROM tokens
WHERE tenant_id = $1 AND secret_hash = $2
FOR UPDATE`

// finishSQL stores an atomic spend's outcome and its audit event. The intent
// is remembered for the retention period from now, however late this is.
const finishSQL = `
WITH u AS (
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(),
        retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation, result_status, CASE WHEN event_outcome THEN result_body END AS body
)
INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
SELECT tenant_id, id, operation, subject, $6, $7, $8, $3, generation, result_status, body FROM u`

// lapseSQL parks a pending token whose lease ran out, for an operator.
const lapseSQL = `
WITH u AS (
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation
)
INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, operation, subject, $3, 'lease_lapse', 'pending', 'unknown', generation FROM u`

// leaseSQL grants a new generation and lease; an existing operation id is kept.
const leaseSQL = `
WITH u AS (
    UPDATE tokens
    SET state = 'pending', generation = generation + 1,
        lease_expires_at = now() + make_interval(secs => $3::integer),
        operation_id = coalesce(operation_id, $4)
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation, lease_expires_at, operation_id
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, detail)
    SELECT tenant_id, id, operation, subject, $5, $6, $7, 'pending', generation,
           jsonb_build_object('lease_expires_at', lease_expires_at, 'operation_id', operation_id)
    FROM u
)
SELECT generation, lease_expires_at, operation_id FROM u`

// finishLeaseSQL records a lease holder's outcome; the generation is the fence.
const finishLeaseSQL = `
WITH u AS (
    UPDATE tokens
    SET state = $4, result_status = $5, result_body = $6, finished_at = now(), lease_expires_at = NULL,
        retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3
    RETURNING tenant_id, id, operation, subject, generation, result_status, CASE WHEN event_outcome THEN result_body END AS body
)
INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body)
SELECT tenant_id, id, operation, subject, $7, $8, 'pending', $4, generation, result_status, body FROM u`

// reportUnknownSQL parks a pending token for an operator.
const reportUnknownSQL = `
WITH u AS (
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3
    RETURNING tenant_id, id, operation, subject, generation
)
INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, operation, subject, $4, 'report_unknown', 'pending', 'unknown', generation FROM u`

// reportStateSQL tells why a report changed nothing: the token's standing,
// whether it was ever leased (the first lease sets operation_id, and nothing
// clears it), and which holder's report, if any, was recorded for the quoted
// generation. Each generation is granted once, so there is at most one.
const reportStateSQL = `
SELECT t.state, t.generation, t.result_status, t.result_body, t.operation_id IS NOT NULL,
       (SELECT e.kind FROM token_events e
        WHERE e.tenant_id = t.tenant_id AND e.token_id = t.id AND e.generation = $3
          AND e.kind IN ('complete', 'fail', 'report_unknown')
        ORDER BY e.seq LIMIT 1)
FROM tokens t
WHERE t.tenant_id = $1 AND t.id = $2`
