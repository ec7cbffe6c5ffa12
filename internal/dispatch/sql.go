package dispatch

const createSQL = `
INSERT INTO webhook_endpoints (tenant_id, id, url, event_types, secret_nonce, secret_key_id, feed_pos)
VALUES ($1, $2, $3, $4, $5, $6, coalesce((SELECT pos FROM event_feed_heads WHERE tenant_id = $1), 0))
RETURNING ` + endpointColumns

const endpointColumns = `tenant_id, id, url, event_types, secret_nonce, secret_key_id, enabled,
       coalesce(disabled_reason, ''), feed_pos, failing_since, created_at`

const listSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`

const getSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`

const setEnabledSQL = `
UPDATE webhook_endpoints
SET enabled = $3, disabled_reason = CASE WHEN $3 THEN NULL ELSE $4 END,
    failing_since = CASE WHEN $3 THEN NULL ELSE failing_since END
WHERE tenant_id = $1 AND id = $2
RETURNING ` + endpointColumns

const deleteSQL = `DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 RETURNING ` + endpointColumns

// redeliverSQL sends again the endpoint's deliveries after position $3: the
// failed ones, or with $4 every one, delivered or not. Each starts a new
// maximum age.
const redeliverSQL = `
WITH u AS (
    UPDATE webhook_deliveries
    SET state = 'pending', next_attempt_at = now(), created_at = now(), finished_at = NULL, leased_until = NULL
    WHERE tenant_id = $1 AND endpoint_id = $2 AND pos > $3
      AND (state = 'failed' OR ($4 AND state = 'delivered'))
    RETURNING 1
)
SELECT count(*) FROM u`

// recentSQL is an endpoint's latest deliveries with their attempts.
const recentSQL = `
SELECT d.pos, d.event_id, d.state, d.attempts, d.next_attempt_at, d.created_at, d.finished_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('attempt', a.attempt, 'at', a.at, 'status', a.status,
                                                    'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.attempt)
                 FROM webhook_attempts a
                 WHERE a.tenant_id = d.tenant_id AND a.endpoint_id = d.endpoint_id AND a.pos = d.pos), '[]')
FROM webhook_deliveries d
WHERE d.tenant_id = $1 AND d.endpoint_id = $2
ORDER BY d.pos DESC
LIMIT $3`

const tenantsSQL = `SELECT DISTINCT tenant_id FROM webhook_endpoints WHERE enabled`

// fanOutSQL offers every enabled endpoint the events after its feed
// position, up to 1000 each, as event/sql.go's readSQL reads a page (a
// constant LIMIT and OFFSET 0, so that even a generic plan looks each event
// up by its key), as deliveries of the types it takes, and moves
// its position past all of them. An endpoint another dispatcher is fanning
// out is skipped.
const fanOutSQL = `
WITH ep AS (
    SELECT tenant_id, id, feed_pos, event_types FROM webhook_endpoints
    WHERE enabled
    FOR UPDATE SKIP LOCKED
), ev AS (
    SELECT ep.tenant_id, ep.id AS endpoint_id, e.pos, e.event_id, e.kind, ep.event_types
    FROM ep CROSS JOIN LATERAL (
        SELECT p.pos, e.event_id, e.kind
        FROM (SELECT pos, token_id, seq FROM event_positions
              WHERE tenant_id = ep.tenant_id AND pos > ep.feed_pos
              ORDER BY pos
              LIMIT 1000) p
        CROSS JOIN LATERAL (
            SELECT event_id, kind FROM token_events e
            WHERE e.tenant_id = ep.tenant_id AND e.token_id = p.token_id AND e.seq = p.seq
            OFFSET 0
        ) e
    ) e
), ins AS (
    INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id)
    SELECT tenant_id, endpoint_id, pos, event_id FROM ev
    WHERE cardinality(event_types) = 0 OR kind = ANY (event_types)
    ON CONFLICT DO NOTHING
    RETURNING 1
), moved AS (
    UPDATE webhook_endpoints w SET feed_pos = m.pos
    FROM (SELECT tenant_id, endpoint_id, max(pos) AS pos FROM ev GROUP BY tenant_id, endpoint_id) m
    WHERE w.tenant_id = m.tenant_id AND w.id = m.endpoint_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM ins)`

// claimSQL leases up to $1 due deliveries of enabled endpoints for $2
// seconds, counting the attempt, and answers what sending them needs.
const claimSQL = `
WITH due AS (
    SELECT d.tenant_id, d.endpoint_id, d.pos
    FROM webhook_deliveries d
    JOIN webhook_endpoints w ON w.tenant_id = d.tenant_id AND w.id = d.endpoint_id AND w.enabled
    WHERE d.state = 'pending' AND d.next_attempt_at <= now()
      AND (d.leased_until IS NULL OR d.leased_until <= now())
    ORDER BY d.next_attempt_at
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
), leased AS (
    UPDATE webhook_deliveries d
    SET leased_until = now() + make_interval(secs => $2), attempts = d.attempts + 1
    FROM due
    WHERE d.tenant_id = due.tenant_id AND d.endpoint_id = due.endpoint_id AND d.pos = due.pos
    RETURNING d.tenant_id, d.endpoint_id, d.pos, d.attempts
)
SELECT l.tenant_id, l.endpoint_id, l.pos, l.attempts, w.url, w.secret_nonce, w.secret_key_id,
       e.event_id, e.kind, e.token_id, coalesce(e.operation, ''), coalesce(e.subject, ''), e.actor,
       e.from_state, e.to_state, e.generation, e.outcome_status, e.outcome_body, e.at
FROM leased l
JOIN webhook_endpoints w ON w.tenant_id = l.tenant_id AND w.id = l.endpoint_id
CROSS JOIN LATERAL (
    SELECT e.* FROM event_positions p
    JOIN token_events e ON e.tenant_id = p.tenant_id AND e.token_id = p.token_id AND e.seq = p.seq
    WHERE p.tenant_id = l.tenant_id AND p.pos = l.pos
    OFFSET 0
) e`

// deliveredSQL records a 2xx answer to attempt $4 of a delivery. A lease
// another dispatcher took over since (a later attempt) is not touched.
const deliveredSQL = `
WITH d AS (
    UPDATE webhook_deliveries
    SET state = 'delivered', finished_at = now(), leased_until = NULL
    WHERE tenant_id = $1 AND endpoint_id = $2 AND pos = $3 AND attempts = $4 AND state = 'pending'
    RETURNING 1
), a AS (
    INSERT INTO webhook_attempts (tenant_id, endpoint_id, pos, attempt, status, duration_ms)
    VALUES ($1, $2, $3, $4, $5, $6)
), w AS (
    UPDATE webhook_endpoints SET failing_since = NULL
    WHERE tenant_id = $1 AND id = $2 AND failing_since IS NOT NULL
)
SELECT count(*) FROM d`

// failedSQL records a failed attempt $4: the delivery waits $7 seconds for
// the next, or fails for good past the maximum age ($8 seconds); an
// endpoint failing for longer than $9 seconds is disabled.
const failedSQL = `
WITH d AS (
    UPDATE webhook_deliveries
    SET state = CASE WHEN created_at <= now() - make_interval(secs => $8) THEN 'failed' ELSE 'pending' END,
        finished_at = CASE WHEN created_at <= now() - make_interval(secs => $8) THEN now() END,
        next_attempt_at = now() + make_interval(secs => $7),
        leased_until = NULL
    WHERE tenant_id = $1 AND endpoint_id = $2 AND pos = $3 AND attempts = $4 AND state = 'pending'
    RETURNING state
), a AS (
    INSERT INTO webhook_attempts (tenant_id, endpoint_id, pos, attempt, status, error, duration_ms)
    VALUES ($1, $2, $3, $4, $5, $6, $10)
), w AS (
    UPDATE webhook_endpoints
    SET failing_since = coalesce(failing_since, now()),
        enabled = enabled AND coalesce(failing_since, now()) > now() - make_interval(secs => $9),
        disabled_reason = CASE WHEN enabled AND coalesce(failing_since, now()) <= now() - make_interval(secs => $9)
                               THEN 'every delivery failed since ' || to_char(failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
                               ELSE disabled_reason END
    WHERE tenant_id = $1 AND id = $2
)
SELECT coalesce((SELECT state FROM d), '')`

// undeliveredSQL is what the metrics report: deliveries still owed, and the
// age of the oldest.
const undeliveredSQL = `
SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
FROM webhook_deliveries WHERE state = 'pending'`
