package store

import (
	"fmt"
)

// IssueSQL claims an intent and records the issue event in one statement,
// provided the policy the candidate was built under ($14, its Version) is
// still the operation's: policies come from an in-process cache. The token
// keeps a copy of that policy ($12, $15 to $19), which is what its spends,
// lease grants and replays go by. It returns one row: whether the policy was
// current, and the times when a token was inserted (NULL when the intent was
// taken or the policy changed).
//
// The declaration's row is locked FOR KEY SHARE until the issue commits:
// that does not wait for redeclarations (an update of non-key columns), but
// makes a concurrent operation.Delete wait and then see this token, so no
// token outlives its declaration unfinished. A built-in operation without a
// row has nothing to lock and cannot be deleted.
var IssueSQL = Transition{
	With: []string{`pol AS (
    SELECT coalesce((SELECT version FROM operations WHERE tenant_id = $1 AND name = $3 FOR KEY SHARE), 0) = $14 AS current
)`},
	Change: `
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
    RETURNING tenant_id, id, operation, subject, created_at, expires_at, retain_until`,
	Event:  Event{Actor: "$13", Kind: "'issued'", To: "'issued'", Generation: "0"},
	Result: `SELECT pol.current, u.created_at, u.expires_at, u.retain_until FROM pol LEFT JOIN u ON true`,
}.SQL()

// ForgetSQL purges a token whose intent retention has passed ($3 the actor).
var ForgetSQL = Transition{
	Change: `
    DELETE FROM tokens WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, state, generation`,
	Event: purged("$3"),
}.SQL()

// FinishSQL stores an atomic spend's outcome and its event. The intent is
// remembered for the retention period from now, however late this is.
var FinishSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(),
        retain_until = greatest(retain_until, ` + nowPlusRetention + `)
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation, result_status, ` + outcomeBody,
	Event: Event{Actor: "$6", Kind: "$7", From: "$8", To: "$3", OutcomeStatus: "result_status", OutcomeBody: "body"},
}.SQL()

// LapseSQL parks a pending token whose lease ran out, for an operator.
var LapseSQL = Transition{
	Change: `
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation`,
	Event: Event{Actor: "$3", Kind: "'lease_lapse'", From: "'pending'", To: "'unknown'"},
}.SQL()

// LeaseSQL grants a new generation and lease; an existing operation id is kept.
var LeaseSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = 'pending', generation = generation + 1,
        lease_expires_at = now() + make_interval(secs => $3::integer),
        operation_id = coalesce(operation_id, $4)
    WHERE tenant_id = $1 AND id = $2
    RETURNING tenant_id, id, operation, subject, generation, lease_expires_at, operation_id`,
	Event: Event{Actor: "$5", Kind: "$6", From: "$7", To: "'pending'",
		Detail: "jsonb_build_object('lease_expires_at', lease_expires_at, 'operation_id', operation_id)"},
	Result: `SELECT generation, lease_expires_at, operation_id FROM u`,
}.SQL()

// FinishLeaseSQL records a lease holder's outcome; the generation is the fence.
var FinishLeaseSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = $4, result_status = $5, result_body = $6, finished_at = now(), lease_expires_at = NULL,
        retain_until = greatest(retain_until, ` + nowPlusRetention + `)
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3
    RETURNING tenant_id, id, operation, subject, generation, result_status, ` + outcomeBody,
	Event: Event{Actor: "$7", Kind: "$8", From: "'pending'", To: "$4", OutcomeStatus: "result_status", OutcomeBody: "body"},
}.SQL()

// ReportUnknownSQL parks a pending token for an operator.
var ReportUnknownSQL = Transition{
	Change: `
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3
    RETURNING tenant_id, id, operation, subject, generation`,
	Event: Event{Actor: "$4", Kind: "'report_unknown'", From: "'pending'", To: "'unknown'"},
}.SQL()

// RevokeSQL revokes an issued token and records the reason. A revoked intent
// is remembered like a spent one: re-issuing it during the retention period
// hands back the revoked token, not a fresh one. A token past its expiry is
// expired, even before the sweeper records it, and so cannot be revoked.
var RevokeSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = 'revoked', finished_at = now(),
        retain_until = greatest(retain_until, ` + nowPlusRetention + `)
    WHERE tenant_id = $1 AND id = $2 AND state = 'issued' AND expires_at > now()
    RETURNING ` + rawColumns,
	Event:  Event{Actor: "$4", Kind: "'revoke'", From: "'issued'", To: "'revoked'", Detail: "jsonb_build_object('reason', $3::text)"},
	Result: `SELECT ` + Columns + ` FROM u`,
}.SQL()

// ReconcileOutcomeSQL stores the outcome an operator established for an
// unknown token, to be replayed to every later spend like a spender's own.
var ReconcileOutcomeSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(), lease_expires_at = NULL,
        retain_until = greatest(retain_until, ` + nowPlusRetention + `)
    WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
    RETURNING ` + rawColumns + `, ` + outcomeBody,
	Event: Event{Actor: "$6", Kind: "$7", From: "'unknown'", To: "$3", OutcomeStatus: "result_status", OutcomeBody: "body",
		Detail: "jsonb_build_object('status', $4::integer)"},
	Result: `SELECT ` + Columns + ` FROM u`,
}.SQL()

// ReconcileNotExecutedSQL makes an unknown token spendable again. The new
// generation fences off the holder that lost track of it; the operation id is
// kept so that, should the operator be wrong, the downstream system still
// deduplicates the next attempt against the first.
var ReconcileNotExecutedSQL = Transition{
	Change: `
    UPDATE tokens
    SET state = 'issued', generation = generation + 1, lease_expires_at = NULL
    WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
    RETURNING ` + rawColumns,
	Event:  Event{Actor: "$3", Kind: "'reconcile_not_executed'", From: "'unknown'", To: "'issued'"},
	Result: `SELECT ` + Columns + ` FROM u`,
}.SQL()

// nowPlusRetention is now() plus the token's retention_seconds, written so
// that Citus can run it in an UPDATE of a distributed table: Citus refuses a
// STABLE function over a column there (now() + make_interval(...) is
// timestamptz + interval, STABLE), but evaluates a stable expression
// without column references on the coordinator to a constant. Here that is
// now() AT TIME ZONE 'UTC', a timestamp; adding the interval to a timestamp
// and reading it back AT TIME ZONE 'UTC' are IMMUTABLE, and give exactly
// now() + the seconds (a fixed zone has no daylight saving to skip). The
// clock is still the database's, read once per statement.
const nowPlusRetention = `(now() AT TIME ZONE 'UTC' + make_interval(secs => retention_seconds)) AT TIME ZONE 'UTC'`

// rawColumns are the token columns Columns reads, stored values
// only: Citus refuses a non-IMMUTABLE function (inspect's state as of now())
// in RETURNING, so a Change returns these and its Result selects
// Columns over them.
const rawColumns = `tenant_id, id, operation, intent_id, subject, state, generation,
       operation_id, payload_digest, created_at, expires_at, retain_until,
       lease_expires_at, finished_at, result_status, result_body`

// outcomeBody is the outcome body a token's events may carry: only what its
// policy (event_outcome) lets them.
const outcomeBody = `CASE WHEN event_outcome THEN result_body END AS body`

// purged is the last event of a deleted token.
func purged(actor string) Event {
	return Event{Actor: actor, Kind: "'purged'", From: "state", To: "'purged'"}
}

// Sweep is one step of the sweep, run in batches of at most $1 rows, each
// batch one statement and so one short transaction, answering how many rows
// it moved or deleted. SKIP LOCKED passes over rows a spender holds right
// now: the spender decides them, and the next batch or sweep sees the
// outcome. For the steps that move tokens, $2 is the actor.
//
// Each batch is of one tenant ($3): on Citus a statement on one tenant runs
// on the one worker that holds it, while FOR UPDATE SKIP LOCKED across
// shards is refused. A sweep over every tenant asks Tenants first, the
// tenants with something due, and runs Tenant for each.
type Sweep struct {
	// Tenants answers the distinct tenants that have rows due ($1 the
	// retention in seconds for the steps that take one, else none), read
	// through the same partial index as the batches: on Citus it fans out
	// to every shard, as a read with no lock.
	Tenants string
	// Tenant is a batch of one tenant, $3.
	Tenant string
	// Retention: $2 of Tenant and $1 of Tenants are the retention in
	// seconds (the deletes of events and deliveries), not the actor.
	Retention bool
}

// sweep renders t, whose With holds a %s where the batch filters by tenant,
// and names the statement that finds the tenants with rows due.
func sweep(tenants string, t Transition) Sweep {
	with := t.With
	t.With = make([]string, len(with))
	for i, w := range with {
		t.With[i] = fmt.Sprintf(w, "tenant_id = $3 AND")
	}
	return Sweep{Tenants: tenants, Tenant: t.SQL()}
}

// SweepLapse parks pending tokens whose lease lapsed as unknown, unless the
// policy they were issued under is takeover (those wait for the next
// spender). The lapsed lease end is kept in the event.
var SweepLapse = sweep(`
SELECT DISTINCT tenant_id FROM tokens
WHERE state = 'pending' AND lease_expires_at <= now() AND on_lease_expiry <> 'takeover'`, Transition{
	With: []string{`due AS (
    SELECT t.tenant_id, t.id, t.lease_expires_at
    FROM tokens t
    WHERE %s t.state = 'pending' AND t.lease_expires_at <= now()
      AND t.on_lease_expiry <> 'takeover'
    LIMIT $1
    FOR UPDATE OF t SKIP LOCKED
)`},
	Change: `
    UPDATE tokens t SET state = 'unknown', lease_expires_at = NULL
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation, due.lease_expires_at`,
	Event: Event{Actor: "$2", Kind: "'lease_lapse'", From: "'pending'", To: "'unknown'",
		Detail: "jsonb_build_object('lease_expires_at', lease_expires_at)"},
	Result: `SELECT count(*) FROM u`,
})

// SweepExpire marks issued tokens past their expiry as expired. Their
// retain_until, set at issue to expiry plus retention, already says when the
// intent may be forgotten; the token finished when it expired, not when the
// sweeper noticed.
var SweepExpire = sweep(`
SELECT DISTINCT tenant_id FROM tokens WHERE state = 'issued' AND expires_at <= now()`, Transition{
	With: []string{`due AS (
    SELECT tenant_id, id FROM tokens
    WHERE %s state = 'issued' AND expires_at <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)`},
	Change: `
    UPDATE tokens t SET state = 'expired', finished_at = t.expires_at
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.generation`,
	Event:  Event{Actor: "$2", Kind: "'expire'", From: "'issued'", To: "'expired'"},
	Result: `SELECT count(*) FROM u`,
})

// SweepPurge deletes terminal tokens whose retention has passed. Their events
// stay, each with a last one saying the token was purged: consumers of the
// feed and webhooks may not have read them yet, and events have a retention
// of their own. The states are listed rather than excluded so that a state
// added later is kept until someone decides it may be purged.
var SweepPurge = sweep(`
SELECT DISTINCT tenant_id FROM tokens
WHERE state IN ('consumed', 'failed', 'revoked', 'expired') AND retain_until <= now()`, Transition{
	With: []string{`due AS (
    SELECT tenant_id, id FROM tokens
    WHERE %s state IN ('consumed', 'failed', 'revoked', 'expired') AND retain_until <= now()
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)`},
	Change: `
    DELETE FROM tokens t USING due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.tenant_id, t.id, t.operation, t.subject, t.state, t.generation`,
	Event:  purged("$2"),
	Result: `SELECT count(*) FROM u`,
})
