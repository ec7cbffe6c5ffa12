package admin

import (
	"fmt"

	"github.com/tokend/tokend/inspect"
)

// Every statement here is constant text, or filled in at init from one:
// request data only ever reaches the database as parameters. Times are the
// database clock's, so every instance and the sweeper agree on what has
// expired.

// lockStateSQL tells why a conditional transition matched no row, with the
// state every read reports (inspect.StateExpr): an issued token past its
// expiry is expired. The lock makes the answer hold until the caller's
// transaction ends.
const lockStateSQL = `SELECT ` + inspect.StateExpr + ` FROM tokens WHERE tenant_id = $1 AND id = $2 FOR UPDATE`

// revokeSQL revokes an issued token and records the reason. A revoked intent
// is remembered like a spent one: re-issuing it during the retention period
// hands back the revoked token, not a fresh one. A token past its expiry is
// expired, even before the sweeper records it, and so cannot be revoked.
const revokeSQL = `
WITH u AS (
    UPDATE tokens
    SET state = 'revoked', finished_at = now(),
        retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
    WHERE tenant_id = $1 AND id = $2 AND state = 'issued' AND expires_at > now()
    RETURNING ` + inspect.Columns + `
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, detail)
    SELECT tenant_id, id, operation, subject, $4, 'revoke', 'issued', 'revoked', generation,
           jsonb_build_object('reason', $3::text)
    FROM u
)
SELECT ` + inspect.Columns + ` FROM u`

// reconcileOutcomeSQL stores the outcome an operator established for an
// unknown token, to be replayed to every later spend like a spender's own.
const reconcileOutcomeSQL = `
WITH u AS (
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(), lease_expires_at = NULL,
        retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
    WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
    RETURNING ` + inspect.Columns + `, CASE WHEN event_outcome THEN result_body END AS body
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status, outcome_body, detail)
    SELECT tenant_id, id, operation, subject, $6, $7, 'unknown', $3, generation, result_status, body, jsonb_build_object('status', $4::integer)
    FROM u
)
SELECT ` + inspect.Columns + ` FROM u`

// reconcileNotExecutedSQL makes an unknown token spendable again. The new
// generation fences off the holder that lost track of it; the operation id is
// kept so that, should the operator be wrong, the downstream system still
// deduplicates the next attempt against the first.
const reconcileNotExecutedSQL = `
WITH u AS (
    UPDATE tokens
    SET state = 'issued', generation = generation + 1, lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
    RETURNING ` + inspect.Columns + `
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $3, 'reconcile_not_executed', 'unknown', 'issued', generation FROM u
)
SELECT ` + inspect.Columns + ` FROM u`

// The sweep runs three steps, each in batches of at most $1 rows, each batch
// one statement and so one short transaction, answering how many tokens it
// moved or deleted. SKIP LOCKED passes over rows a
// spender holds right now: the spender decides them, and the next batch or
// sweep sees the outcome. Each step comes in an all-tenants form (the
// sweeper) and a one-tenant form ($2, the operator's purge): one statement
// with an optional tenant filter would be planned for the worst case.

// lapseSQL parks pending tokens whose lease lapsed as unknown, unless the
// policy they were issued under is takeover (those wait for the next
// spender). The lapsed lease end is kept in the event.
const lapseSQL = `
WITH due AS (
    SELECT t.tenant_id, t.id, t.lease_expires_at
    FROM tokens t
    WHERE t.state = 'pending' AND t.lease_expires_at <= now()
      AND t.on_lease_expiry <> 'takeover'
    LIMIT $1
    FOR UPDATE OF t SKIP LOCKED
), u AS (
    UPDATE tokens t SET state = 'unknown', lease_expires_at = NULL
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation, due.lease_expires_at
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, detail)
    SELECT tenant_id, id, operation, subject, $2, 'lease_lapse', 'pending', 'unknown', generation,
           jsonb_build_object('lease_expires_at', lease_expires_at)
    FROM u
)
SELECT count(*) FROM u`

const lapseTenantSQL = `
WITH due AS (
    SELECT t.tenant_id, t.id, t.lease_expires_at
    FROM tokens t
    WHERE t.tenant_id = $2 AND t.state = 'pending' AND t.lease_expires_at <= now()
      AND t.on_lease_expiry <> 'takeover'
    LIMIT $1
    FOR UPDATE OF t SKIP LOCKED
), u AS (
    UPDATE tokens t SET state = 'unknown', lease_expires_at = NULL
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation, due.lease_expires_at
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, detail)
    SELECT tenant_id, id, operation, subject, $3, 'lease_lapse', 'pending', 'unknown', generation,
           jsonb_build_object('lease_expires_at', lease_expires_at)
    FROM u
)
SELECT count(*) FROM u`

// expireSQL marks issued tokens past their expiry as expired. Their
// retain_until, set at issue to expiry plus retention, already says when the
// intent may be forgotten; the token finished when it expired, not when the
// sweeper noticed.
const expireSQL = `
WITH due AS (
    SELECT tenant_id, id FROM tokens
    WHERE state = 'issued' AND expires_at <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE tokens t SET state = 'expired', finished_at = t.expires_at
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $2, 'expire', 'issued', 'expired', generation FROM u
)
SELECT count(*) FROM u`

const expireTenantSQL = `
WITH due AS (
    SELECT tenant_id, id FROM tokens
    WHERE tenant_id = $2 AND state = 'issued' AND expires_at <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), u AS (
    UPDATE tokens t SET state = 'expired', finished_at = t.expires_at
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $3, 'expire', 'issued', 'expired', generation FROM u
)
SELECT count(*) FROM u`

// deleteSQL purges terminal tokens whose retention has passed. Their events
// stay, each with a last one saying the token was purged: consumers of the
// feed and webhooks may not have read them yet, and events have a retention
// of their own (deleteEventsSQL). The states are listed rather than excluded
// so that a state added later is kept until someone decides it may be purged.
const deleteSQL = `
WITH due AS (
    SELECT tenant_id, id FROM tokens
    WHERE state IN ('consumed', 'failed', 'revoked', 'expired') AND retain_until <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM tokens t USING due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.state, t.generation
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $2, 'purged', state, 'purged', generation FROM del
)
SELECT count(*) FROM del`

const deleteTenantSQL = `
WITH due AS (
    SELECT tenant_id, id FROM tokens
    WHERE tenant_id = $2 AND state IN ('consumed', 'failed', 'revoked', 'expired') AND retain_until <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM tokens t USING due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.state, t.generation
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, $3, 'purged', state, 'purged', generation FROM del
)
SELECT count(*) FROM del`

// deleteEventsSQL deletes events past the event retention ($2 seconds) whose
// token is gone. Only positioned events go: one still waiting for its
// position has not been offered to the feed yet; nor do events a webhook
// delivery still owes, or that an enabled endpoint has yet to be offered.
// A live token keeps its whole trail, which its operator record shows.
var (
	deleteEventsSQL       = fmt.Sprintf(deleteEventsText, "")
	deleteEventsTenantSQL = fmt.Sprintf(deleteEventsText, "e.tenant_id = $3 AND")
)

// deleteDeliveriesText deletes finished webhook deliveries (delivered, or
// failed for good) that finished longer ago than the event retention ($2
// seconds), with their attempts (ON DELETE CASCADE). Pending ones stay.
const deleteDeliveriesText = `
WITH due AS (
    SELECT tenant_id, endpoint_id, pos FROM webhook_deliveries
    WHERE %s state <> 'pending' AND finished_at < now() - make_interval(secs => $2)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM webhook_deliveries d USING due
    WHERE d.tenant_id = due.tenant_id AND d.endpoint_id = due.endpoint_id AND d.pos = due.pos
    RETURNING 1
)
SELECT count(*) FROM del`

var (
	deleteDeliveriesSQL       = fmt.Sprintf(deleteDeliveriesText, "")
	deleteDeliveriesTenantSQL = fmt.Sprintf(deleteDeliveriesText, "tenant_id = $3 AND")
)

// deleteEventsText is both forms of deleteEventsSQL, the one-tenant form
// with its tenant filter in the %s.
const deleteEventsText = `
WITH due AS (
    SELECT e.tenant_id, e.token_id, e.seq FROM token_events e
    WHERE %s e.pos IS NOT NULL AND e.at < now() - make_interval(secs => $2)
      AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.tenant_id = e.tenant_id AND t.id = e.token_id)
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                      WHERE d.tenant_id = e.tenant_id AND d.pos = e.pos AND d.state = 'pending')
      AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w
                      WHERE w.tenant_id = e.tenant_id AND w.enabled AND w.feed_pos < e.pos)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), del AS (
    DELETE FROM token_events e USING due
    WHERE e.tenant_id = due.tenant_id AND e.token_id = due.token_id AND e.seq = due.seq
    RETURNING 1
)
SELECT count(*) FROM del`

// unresolvedSQL counts the tokens someone owes an outcome for. Ages are in
// microseconds, measured from the token's creation. The stored state is the
// one every read reports here: inspect.StateExpr only ever turns an issued
// token into an expired one, neither of which is counted, so the partial
// index tokens_unresolved still serves these.
const unresolvedSQL = `
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'unknown'),
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')) * 1e6, 0)::bigint,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'unknown')) * 1e6, 0)::bigint
FROM tokens
WHERE state IN ('pending', 'unknown')`

const unresolvedTenantSQL = `
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'unknown'),
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')) * 1e6, 0)::bigint,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'unknown')) * 1e6, 0)::bigint
FROM tokens
WHERE tenant_id = $1 AND state IN ('pending', 'unknown')`

// tryLockSQL takes the sweeper's lock for the guard transaction that holds
// it while the sweep's batches commit on other connections. A lock scoped to
// a transaction ends with it, however the sweeper ends, and cannot be left
// behind on a pooled backend (PgBouncer in transaction mode hands each
// transaction whichever backend is free), as a session-level lock would be.
const tryLockSQL = `SELECT pg_try_advisory_xact_lock($1)`
