package store

// lockSQL reads a token by its secret hash under a row lock, with the policy
// it was issued under (never its operation's current one, which may have
// been redeclared or deleted since). Expiry and lease end are judged by the
// database clock once the lock is held (lockJudged): judged before, by the
// transaction's now() or at the scan, a spend that waited for the lock
// could spend a token that another spend, holding it, had already refused
// as expired (docs/robustness.md, track record #2).
var lockSQL = lockJudged("")

// lockBoundedSQL is lockSQL that first bounds, for the rest of the
// transaction, how long it and later statements wait for a lock ($3, in
// lock_timeout's milliseconds). The bound is an uncorrelated subquery, which
// Postgres evaluates once, before the scan and so before the row lock: one
// statement instead of a set_config of its own, a round of parsing and
// answering less per spend on both sides.
var lockBoundedSQL = lockJudged(`
      AND (SELECT set_config('lock_timeout', $3, true)) IS NOT NULL`)

// lockJudged is the lock of lockSQL, with cond after its WHERE. The locking
// read is a CTE, so that the clock is read in the outer SELECT, after the
// row lock is granted; clock_timestamp(), not now(), which is when the
// transaction began.
func lockJudged(cond string) string {
	return `
WITH l AS MATERIALIZED (
    SELECT id, operation, subject, secret_key_id, state, generation, payload_digest, expires_at,
           result_status, result_body, operation_id, lease_expires_at,
           mode, on_lease_expiry, lease_seconds, ignored_fields
    FROM tokens
    WHERE tenant_id = $1 AND secret_hash = $2` + cond + `
    FOR UPDATE
)
SELECT id, operation, subject, secret_key_id, state, generation, payload_digest,
       expires_at <= clock_timestamp(),
       result_status, result_body, operation_id,
       coalesce(lease_expires_at <= clock_timestamp(), false),
       ceil(extract(epoch FROM lease_expires_at - clock_timestamp()))::integer,
       mode, on_lease_expiry, lease_seconds, ignored_fields
FROM l`
}

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
