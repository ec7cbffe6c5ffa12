package consume

const setLockTimeoutSQL = `SELECT set_config('lock_timeout', $1, true)`

// lockSQL reads a token by its secret hash under a row lock, with its
// operation's policy. Expiry and lease end are judged by the database clock.
const lockSQL = `
SELECT t.id, t.operation, t.subject, t.secret_key_id, t.state, t.generation, t.payload_digest,
       t.expires_at <= now(),
       t.result_status, t.result_body, t.operation_id,
       coalesce(t.lease_expires_at <= now(), false),
       ceil(extract(epoch FROM t.lease_expires_at - now()))::integer,
       o.mode, o.on_lease_expiry, o.lease_seconds, o.ignored_fields
FROM tokens t
LEFT JOIN operations o ON o.tenant_id = t.tenant_id AND o.name = t.operation
WHERE t.tenant_id = $1 AND t.secret_hash = $2
FOR UPDATE OF t`

// finishSQL stores an atomic spend's outcome and its audit event. The intent
// is remembered for the retention period from now, however late this is.
const finishSQL = `
WITH u AS (
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(),
        retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, generation
)
INSERT INTO token_events (tenant_id, token_id, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, $6, $7, $8, $3, generation FROM u`

// lapseSQL parks a pending token whose lease ran out, for an operator.
const lapseSQL = `
WITH u AS (
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, generation
)
INSERT INTO token_events (tenant_id, token_id, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, $3, 'lease_lapse', 'pending', 'unknown', generation FROM u`

// leaseSQL grants a new generation and lease; an existing operation id is kept.
const leaseSQL = `
WITH u AS (
    UPDATE tokens
    SET state = 'pending', generation = generation + 1,
        lease_expires_at = now() + make_interval(secs => $3::integer),
        operation_id = coalesce(operation_id, $4)
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, generation, lease_expires_at, operation_id
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, actor, kind, from_state, to_state, generation, detail)
    SELECT tenant_id, id, $5, $6, $7, 'pending', generation,
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
    RETURNING tenant_id, id, generation
)
INSERT INTO token_events (tenant_id, token_id, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, $7, $8, 'pending', $4, generation FROM u`

// reportUnknownSQL parks a pending token for an operator.
const reportUnknownSQL = `
WITH u AS (
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3
    RETURNING tenant_id, id, generation
)
INSERT INTO token_events (tenant_id, token_id, actor, kind, from_state, to_state, generation)
SELECT tenant_id, id, $4, 'report_unknown', 'pending', 'unknown', generation FROM u`

const finishStateSQL = `SELECT state, generation, result_status, result_body FROM tokens WHERE tenant_id = $1 AND id = $2`
