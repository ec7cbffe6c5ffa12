package store

import (
	"fmt"
)

// Issuing a token is three statements sent together (Issue): issueSQL,
// issueEventSQL and policyCurrentSQL. They are separate statements, each on
// one tenant, so that on Citus each runs on the one worker holding the
// tenant and the transaction commits there in one phase. As one statement
// (a CTE feeding INSERT … SELECT) Citus ran it through the coordinator and
// committed it with two-phase commit; a worker restarting between the two
// phases left a token whose issue had been answered invisible until Citus
// recovered the transaction, and its spend answered 404 meanwhile.

// issueSQL claims an intent: it inserts the token unless the intent is
// taken. The token keeps a copy of the policy it was issued under ($12,
// $14 to $18). It returns the times of the token inserted, no row when the
// intent was taken.
const issueSQL = `
INSERT INTO tokens (tenant_id, id, operation, intent_id, subject,
                    secret_hash, secret_nonce, secret_key_id, fingerprint, payload_digest,
                    ttl_seconds, retention_seconds, state, expires_at, retain_until,
                    mode, on_lease_expiry, lease_seconds, ignored_fields, event_outcome)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::integer, $12::integer, 'issued',
        now() + make_interval(secs => $11::integer),
        now() + make_interval(secs => $11::integer + $12::integer),
        $13, $14, $15, $16, $17)
ON CONFLICT (tenant_id, operation, intent_id) DO NOTHING
RETURNING created_at, expires_at, retain_until`

// issueEventSQL records the issue event of token $2 of tenant $1 ($3 the
// actor), after issueSQL in the same transaction. Token ids are new at
// each issue, so a token with this id exists only if issueSQL inserted it.
var issueEventSQL = recordSQL(`tenant_id = $1 AND id = $2`,
	Event{Actor: "$3", Kind: "'issued'", To: "'issued'", Generation: "0"})

// policyCurrentSQL checks, after issueSQL in the same transaction, that
// the policy the token was issued under ($3, its Version: policies come
// from an in-process cache) is still operation $2's of tenant $1, and
// fails the statement, and so the transaction, with SQLSTATE TD001
// (ErrStalePolicy) when it is not.
//
// The declaration's row is locked FOR KEY SHARE until the issue commits:
// that does not wait for redeclarations (an update of non-key columns), but
// makes a concurrent operation.Delete wait and then see this token, so no
// token outlives its declaration unfinished; or, when the delete committed
// first, this check fails. A built-in operation without a row has nothing
// to lock and cannot be deleted.
const policyCurrentSQL = `
SELECT tokend_policy_current(
    coalesce((SELECT version FROM operations WHERE tenant_id = $1 AND name = $2 FOR KEY SHARE), 0), $3::bigint)`

// forgetEventSQL records the purge of a token whose intent retention has
// passed ($3 the actor); forgetSQL then deletes it. The token is locked
// (existingSQL) when these run, so the event sees the row the delete
// removes.
var forgetEventSQL = recordSQL(`tenant_id = $1 AND id = $2`, purged("$3"))

// forgetSQL deletes the token forgetEventSQL recorded.
const forgetSQL = `DELETE FROM tokens WHERE tenant_id = $1 AND id = $2`

// finishSQL stores an atomic spend's outcome; the caller's Moved gives the
// event's kind (the action) and the state moved from. The intent is
// remembered for the retention period from now, however late this is.
var finishSQL = step("", "", `
    UPDATE tokens
    SET state = $3, result_status = $4, result_body = $5, finished_at = now(),
        retain_until = greatest(retain_until, `+nowPlusRetention+`), transition_id = $6
    WHERE tenant_id = $1 AND id = $2`, "", true)

// lapseSQL parks a pending token whose lease ran out, for an operator.
var lapseSQL = step("lease_lapse", "pending", `
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL, transition_id = $3
    WHERE tenant_id = $1 AND id = $2`, "", false)

// leaseSQL grants a new generation and lease; an existing operation id is
// kept. The caller's Moved gives the kind (grant or takeover) and the state
// moved from.
var leaseSQL = step("", "", `
    UPDATE tokens
    SET state = 'pending', generation = generation + 1,
        lease_expires_at = now() + make_interval(secs => $3::integer),
        operation_id = coalesce(operation_id, $4), transition_id = $5
    WHERE tenant_id = $1 AND id = $2
    RETURNING generation, lease_expires_at, operation_id`,
	"jsonb_build_object('lease_expires_at', lease_expires_at, 'operation_id', operation_id)", false)

// finishLeaseSQL records a lease holder's outcome; the generation is the
// fence. The caller's Moved gives the kind (complete or fail).
var finishLeaseSQL = step("", "pending", `
    UPDATE tokens
    SET state = $4, result_status = $5, result_body = $6, finished_at = now(), lease_expires_at = NULL,
        retain_until = greatest(retain_until, `+nowPlusRetention+`), transition_id = $7
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3`, "", true)

// reportUnknownSQL parks a pending token for an operator.
var reportUnknownSQL = step("report_unknown", "pending", `
    UPDATE tokens SET state = 'unknown', lease_expires_at = NULL, transition_id = $4
    WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND generation = $3`, "", false)

// revokeSQL revokes an issued token; the reason is Record's seventh
// parameter (Moved.Extra). A revoked intent is remembered like a spent one:
// re-issuing it during the retention period hands back the revoked token,
// not a fresh one. A token past its expiry is expired, even before the
// sweeper records it, and so cannot be revoked.
var revokeSQL = step("revoke", "issued", `
    WITH u AS (
        UPDATE tokens
        SET state = 'revoked', finished_at = now(),
            retain_until = greatest(retain_until, `+nowPlusRetention+`), transition_id = $3
        WHERE tenant_id = $1 AND id = $2 AND state = 'issued' AND expires_at > now()
        RETURNING `+rawColumns+`
    )
    SELECT `+Columns+` FROM u`, "jsonb_build_object('reason', $7::text)", false)

// reconcileOutcomeSQL stores the outcome an operator established for an
// unknown token, to be replayed to every later spend like a spender's own.
// The caller's Moved gives the kind.
var reconcileOutcomeSQL = step("", "unknown", `
    WITH u AS (
        UPDATE tokens
        SET state = $3, result_status = $4, result_body = $5, finished_at = now(), lease_expires_at = NULL,
            retain_until = greatest(retain_until, `+nowPlusRetention+`), transition_id = $6
        WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
        RETURNING `+rawColumns+`
    )
    SELECT `+Columns+` FROM u`, "jsonb_build_object('status', result_status)", true)

// reconcileNotExecutedSQL makes an unknown token spendable again. The new
// generation fences off the holder that lost track of it; the operation id is
// kept so that, should the operator be wrong, the downstream system still
// deduplicates the next attempt against the first.
var reconcileNotExecutedSQL = step("reconcile_not_executed", "unknown", `
    WITH u AS (
        UPDATE tokens
        SET state = 'issued', generation = generation + 1, lease_expires_at = NULL, transition_id = $3
        WHERE tenant_id = $1 AND id = $2 AND state = 'unknown'
        RETURNING `+rawColumns+`
    )
    SELECT `+Columns+` FROM u`, "", false)

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
    RETURNING t.event_xid, t.tenant_id, t.id, t.operation, t.subject, t.generation, due.lease_expires_at`,
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
	Change: expireChange,
	Event:  expireEvent("$2"),
	Result: `SELECT count(*) FROM u`,
})

// expireChange expires the tokens of the CTE due, for SweepExpire and
// expireReadSQL alike; expireEvent is its event, by actor.
const expireChange = `
    UPDATE tokens t SET state = 'expired', finished_at = t.expires_at
    FROM due
    WHERE t.tenant_id = due.tenant_id AND t.id = due.id
    RETURNING t.event_xid, t.tenant_id, t.id, t.operation, t.subject, t.generation`

func expireEvent(actor string) Event {
	return Event{Actor: actor, Kind: "'expire'", From: "'issued'", To: "'expired'"}
}

// expireReadSQL records, as SweepExpire does, the expiry of tenant $1's
// tokens $2 that a read found issued past their expiry (expiringExpr);
// $3 is the actor. It waits for a writer holding one of them: a spend that
// judged the token unexpired and has not committed yet. When that writer
// commits, the row it left is no longer issued and is not expired here; the
// read then reads what it left. Locks are taken in id order, as every such
// read takes them. expireReadBoundedSQL waits at most $4 (lock_timeout's
// milliseconds), set for its own statement: it runs outside any
// transaction of the caller's, whose settings it must not change.
var (
	expireReadSQL        = expireRead("")
	expireReadBoundedSQL = expireRead("\n      AND (SELECT set_config('lock_timeout', $4, true)) IS NOT NULL")
)

func expireRead(bound string) string {
	return Transition{
		With: []string{`due AS (
    SELECT tenant_id, id FROM tokens
    WHERE tenant_id = $1 AND id = ANY($2::text[]) AND state = 'issued' AND expires_at <= now()` + bound + `
    ORDER BY id
    FOR UPDATE
)`},
		Change: expireChange,
		Event:  expireEvent("$3"),
		Result: `SELECT count(*) FROM u`,
	}.SQL()
}

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
    RETURNING t.event_xid, t.tenant_id, t.id, t.operation, t.subject, t.state, t.generation`,
	Event:  purged("$2"),
	Result: `SELECT count(*) FROM u`,
})
