package store

import (
	"fmt"
)

// lockStateSQL locks a token and answers its state as every read reports it
// (StateExpr): an issued token past its expiry is expired, judged by the
// clock once the lock is held, as lockSQL judges it. TransitionTx takes it
// before a transition out of issued, and to tell why a transition matched
// no row. The lock makes the answer hold until the caller's transaction
// ends.
const lockStateSQL = `
WITH l AS MATERIALIZED (SELECT state, expires_at FROM tokens WHERE tenant_id = $1 AND id = $2 FOR UPDATE)
SELECT CASE WHEN state = 'issued' AND expires_at <= clock_timestamp() THEN 'expired' ELSE state END FROM l`

// DeleteEvents deletes events past the event retention ($2 seconds) whose
// token is gone, in batches of $1, a Sweep's two forms. Only positioned
// events go (the walk is of event_positions): one still waiting for its
// position has not been offered to the feed yet; nor do events a webhook
// delivery still owes (pending, or parked while its endpoint is disabled),
// or that an enabled endpoint has yet to be offered.
// A live token keeps its whole trail, which its operator record shows.
var DeleteEvents = Sweep{Tenants: `
SELECT DISTINCT tenant_id FROM event_positions WHERE at < now() - make_interval(secs => $1)`,
	Tenant: fmt.Sprintf(deleteEventsText, "p.tenant_id = $3 AND"), Retention: true}

// DeleteDeliveries deletes finished webhook deliveries (delivered, or
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

var DeleteDeliveries = Sweep{Tenants: `
SELECT DISTINCT tenant_id FROM webhook_deliveries WHERE state <> 'pending' AND finished_at < now() - make_interval(secs => $1)`,
	Tenant: fmt.Sprintf(deleteDeliveriesText, "tenant_id = $3 AND"), Retention: true}

// deleteEventsText is both forms of DeleteEvents, the one-tenant form
// with its tenant filter in the %s.
const deleteEventsText = `
WITH due AS (
    SELECT p.tenant_id, p.pos, p.token_id, p.seq FROM event_positions p
    WHERE %s p.at < now() - make_interval(secs => $2)
      AND NOT EXISTS (SELECT 1 FROM tokens t WHERE t.tenant_id = p.tenant_id AND t.id = p.token_id)
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
                      WHERE d.tenant_id = p.tenant_id AND d.pos = p.pos AND d.state IN ('pending', 'parked'))
      AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w
                      WHERE w.tenant_id = p.tenant_id AND w.enabled AND w.feed_pos < p.pos)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), unplaced AS (
    DELETE FROM event_positions p USING due
    WHERE p.tenant_id = due.tenant_id AND p.pos = due.pos
), del AS (
    DELETE FROM token_events e USING due
    WHERE e.tenant_id = due.tenant_id AND e.token_id = due.token_id AND e.seq = due.seq
    RETURNING 1
)
SELECT count(*) FROM del`

// unresolvedSQL counts the tokens someone owes an outcome for. Ages are in
// microseconds, measured from the token's creation. The stored state is the
// one every read reports here: StateExpr only ever turns an issued
// token into an expired one, neither of which is counted, so the partial
// index tokens_unresolved still serves these.
var (
	unresolvedSQL       = fmt.Sprintf(unresolvedText, "")
	unresolvedTenantSQL = fmt.Sprintf(unresolvedText, "tenant_id = $1 AND")
)

const unresolvedText = `
SELECT count(*) FILTER (WHERE state = 'pending'),
       count(*) FILTER (WHERE state = 'unknown'),
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')) * 1e6, 0)::bigint,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'unknown')) * 1e6, 0)::bigint
FROM tokens
WHERE %s state IN ('pending', 'unknown')`

// tryLockSQL takes the sweeper's lock for the guard transaction that holds
// it while the sweep's batches commit on other connections. A lock scoped to
// a transaction ends with it, however the sweeper ends, and cannot be left
// behind on a pooled backend (PgBouncer in transaction mode hands each
// transaction whichever backend is free), as a session-level lock would be.
const tryLockSQL = `SELECT pg_try_advisory_xact_lock($1)`
