package store

// The statements of webhook delivery (internal/infra/dispatch): endpoints, the
// fan-out of the feed into deliveries, claims and attempts.

// endpointLockTenantSQL serializes endpoint registrations of tenant $1, so that
// two at once cannot both pass the cap.
const endpointLockTenantSQL = `SELECT pg_advisory_xact_lock(hashtextextended('tokend.webhooks:' || $1, 0))`

// endpointCreateSQL registers an endpoint unless tenant $1 has $7 already.
const endpointCreateSQL = `
INSERT INTO webhook_endpoints (tenant_id, id, url, event_types, secret_nonce, secret_key_id, feed_pos)
SELECT $1, $2, $3, $4, $5, $6, coalesce((SELECT pos FROM event_feed_heads WHERE tenant_id = $1), 0)
WHERE (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1) < $7
RETURNING ` + endpointColumns

// endpointColumns are an endpoint's columns, in the order scanEndpoint reads
// them.
const endpointColumns = `tenant_id, id, url, event_types, secret_nonce, secret_key_id, enabled,
       coalesce(disabled_reason, ''), feed_pos, failing_since, created_at,
       CASE WHEN prev_secret_until > (SELECT now()) THEN prev_secret_until END`

// (SELECT now()), here and below, is now() where Citus refuses a
// non-IMMUTABLE function (in RETURNING, CASE and COALESCE of a statement
// that writes a distributed table): Citus evaluates the subquery on the
// coordinator to a constant before it sends the statement to the worker.
// The whole column-free expression goes in the subquery: an operator such
// as timestamptz - interval over it is STABLE again, and refused.
// On plain Postgres it is an InitPlan with now()'s value. The clock is the
// database's either way, read once per transaction.

// endpointRotateSQL gives the endpoint the secret of nonce $3 under key $4; the one
// it replaces keeps signing beside it for $5 seconds. One rotated earlier
// and still in its overlap stops signing now.
const endpointRotateSQL = `
UPDATE webhook_endpoints
SET prev_secret_nonce = secret_nonce, prev_secret_key_id = secret_key_id,
    prev_secret_until = now() + make_interval(secs => $5),
    secret_nonce = $3, secret_key_id = $4
WHERE tenant_id = $1 AND id = $2
RETURNING ` + endpointColumns

// endpointListSQL is tenant $1's endpoints, oldest first.
const endpointListSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY created_at, id`

// endpointGetSQL is tenant $1's endpoint $2.
const endpointGetSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`

// endpointSetEnabledSQL enables or disables an endpoint, writing its row
// only. Its deliveries keep their state: a pending delivery of a disabled
// endpoint is parked by the flag alone (no claim takes it: claimPickSQL,
// dueTenantsSQL and claimLeaseSQL require the endpoint enabled; the record
// and the metrics show it parked: parkedExpr). Enabling a disabled
// endpoint clears its failure run and sets resumed_at, from which its
// deliveries made before get a new maximum age (failedSQL); before it,
// SetEndpointEnabled makes them due now (endpointResumeParkedSQL,
// endpointHurrySQL). A lease is never cleared: a delivery in flight stays
// leased, counted against its tenant and claimed by no one else, until its
// attempt is recorded.
const endpointSetEnabledSQL = `
UPDATE webhook_endpoints
SET enabled = $3, disabled_reason = CASE WHEN $3 THEN NULL ELSE $4 END,
    failing_since = CASE WHEN $3 THEN NULL ELSE failing_since END,
    resumed_at = CASE WHEN $3 AND NOT enabled THEN (SELECT now()) ELSE resumed_at END
WHERE tenant_id = $1 AND id = $2
RETURNING ` + endpointColumns

// ResumeBatch is the most deliveries one statement of an enable resumes
// (endpointResumeParkedSQL, endpointHurrySQL): each is a short transaction
// of its own, so that none holds back the feed's positions for long.
const ResumeBatch = 200

// endpointResumeParkedSQL makes up to $4 deliveries of tenant $1's endpoint
// $2 after position $3 that the previous release left parked pending, due
// now, with a new maximum age, as that release's enable did; it answers how
// many it found and the last position: the next batch starts after it.
// This release never writes parked (a delivery of a disabled endpoint
// stays pending); a release after the last one that wrote it drops this.
const endpointResumeParkedSQL = `
WITH r AS (
    SELECT pos FROM webhook_deliveries
    WHERE tenant_id = $1 AND endpoint_id = $2 AND state = 'parked' AND pos > $3
    ORDER BY pos
    LIMIT $4
), u AS (
    UPDATE webhook_deliveries d
    SET state = 'pending', next_attempt_at = now(), created_at = (SELECT now()), leased_until = NULL
    FROM r
    WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND d.pos = r.pos AND d.state = 'parked'
    RETURNING 1
)
SELECT (SELECT count(*) FROM r), coalesce((SELECT max(pos) FROM r), $3), (SELECT count(*) FROM u)`

// endpointHurrySQL makes due now up to $4 deliveries of tenant $1's
// endpoint $2 after position $3 that wait out a backoff (not those in
// flight), as enabling a disabled endpoint always did, and answers how many
// it found and the last position: the next batch starts after it. It reads
// the endpoint's due index beyond now only: a backlog never tried costs
// nothing here, read or written. The update finds each by its primary key
// (its positions as an array, its state tested as claimLeaseSQL tests it):
// joined to them, with "state = 'pending'", it was planned as a walk of
// the endpoint's due index, all of its pending deliveries.
const endpointHurrySQL = `
WITH r AS (
    SELECT pos FROM webhook_deliveries
    WHERE tenant_id = $1 AND endpoint_id = $2 AND state = 'pending' AND next_attempt_at > now() AND pos > $3
      AND (leased_until IS NULL OR leased_until <= now())
    ORDER BY pos
    LIMIT $4
), u AS (
    UPDATE webhook_deliveries d
    SET next_attempt_at = now()
    WHERE d.tenant_id = $1 AND d.endpoint_id = $2 AND d.pos = ANY ((SELECT array_agg(pos) FROM r)::bigint[])
      AND d.state NOT IN ('delivered', 'failed', 'parked')
      AND (d.leased_until IS NULL OR d.leased_until <= now())
    RETURNING 1
)
SELECT (SELECT count(*) FROM r), coalesce((SELECT max(pos) FROM r), $3), (SELECT count(*) FROM u)`

// endpointDeleteSQL deletes tenant $1's endpoint $2 with its deliveries.
const endpointDeleteSQL = `DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2 RETURNING ` + endpointColumns

// redeliverSQL sends the endpoint's deliveries after position $3 (only the
// one at $5, when given) now: the failed ones; with $4 also the pending
// ones (hurried: due now) and parked ones; with $6 also the delivered ones.
// A delivery sent again starts a new maximum age; a hurried one keeps its
// own, and its lease when in flight. Each is left pending: on a disabled
// endpoint that is parked until it is enabled (parkedExpr). The one at $5
// is a range of one position, so that a generic plan probes the primary
// key for it instead of reading the endpoint's deliveries after $3.
const redeliverSQL = `
WITH u AS (
    UPDATE webhook_deliveries d
    SET state = 'pending',
        next_attempt_at = now(),
        created_at = CASE WHEN d.state = 'pending' THEN d.created_at ELSE (SELECT now()) END,
        leased_until = CASE WHEN d.state = 'pending' THEN d.leased_until END,
        finished_at = NULL
    FROM webhook_endpoints w
    WHERE w.tenant_id = $1 AND w.id = $2 AND d.tenant_id = w.tenant_id AND d.endpoint_id = w.id
      AND d.pos > $3 AND d.pos BETWEEN coalesce($5::bigint, $3) AND coalesce($5::bigint, 9223372036854775807)
      AND (d.state = 'failed' OR ($4 AND d.state IN ('pending', 'parked')) OR ($6 AND d.state = 'delivered'))
    RETURNING 1
)
SELECT count(*) FROM u`

// recentDeliveriesSQL is an endpoint's latest deliveries with their
// attempts, a pending one shown parked while its endpoint is disabled
// (parkedExpr).
const recentDeliveriesSQL = `
SELECT d.pos, d.event_id, CASE WHEN ` + parkedExpr + ` THEN 'parked' ELSE d.state END, d.attempts, d.next_attempt_at, d.created_at, d.finished_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object('attempt', a.attempt, 'at', a.at, 'status', a.status,
                                                    'error', a.error, 'duration_ms', a.duration_ms) ORDER BY a.attempt)
                 FROM webhook_attempts a
                 WHERE a.tenant_id = d.tenant_id AND a.endpoint_id = d.endpoint_id AND a.pos = d.pos), '[]')
FROM webhook_deliveries d
JOIN webhook_endpoints w ON w.tenant_id = $1 AND w.tenant_id = d.tenant_id AND w.id = d.endpoint_id
WHERE d.tenant_id = $1 AND d.endpoint_id = $2
ORDER BY d.pos DESC
LIMIT $3`

// webhookTenantsSQL is the tenants with an endpoint, enabled or not: a
// disabled one is owed its events too (fanOutSQL parks them).
const webhookTenantsSQL = `SELECT DISTINCT tenant_id FROM webhook_endpoints`

// behindSQL is the endpoints, enabled or not, whose feed position is behind
// their tenant's feed head: what a round fans out, none when idle. It reads
// the endpoints and the heads only, however many deliveries there are.
const behindSQL = `
SELECT w.tenant_id, w.id FROM webhook_endpoints w
JOIN event_feed_heads h ON h.tenant_id = w.tenant_id
WHERE h.pos > w.feed_pos`

// FanOutBatch is the most events one fan-out statement offers an endpoint.
const FanOutBatch = 500

// fanOutSQL offers endpoint $2 of tenant $1 the events after its feed
// position, up to FanOutBatch, as event/sql.go's readSQL reads a page (a
// constant LIMIT and OFFSET 0, so that even a generic plan looks each event
// up by its key), as deliveries of the types it takes, and moves its
// position past all of them. One endpoint at a time keeps the plan's cost
// to one endpoint's page, so it stays under jit_above_cost whatever the
// number of endpoints or deliveries. An endpoint another dispatcher is
// fanning out is skipped. A disabled endpoint's deliveries are made
// pending like any other, parked by its flag (parkedExpr): owed (its
// record and tokend_webhook_parked show them), not lag, not tried until it
// is enabled.
const fanOutSQL = `
WITH ep AS (
    SELECT tenant_id, id, feed_pos, event_types FROM webhook_endpoints
    WHERE tenant_id = $1 AND id = $2
    FOR UPDATE SKIP LOCKED
), ev AS (
    SELECT ep.tenant_id, ep.id AS endpoint_id, e.pos, e.event_id, e.kind, ep.event_types
    FROM ep CROSS JOIN LATERAL (
        SELECT p.pos, e.event_id, e.kind
        FROM (SELECT pos, token_id, seq FROM event_positions
              WHERE tenant_id = $1 AND pos > ep.feed_pos
              ORDER BY pos
              LIMIT 500) p -- FanOutBatch
        CROSS JOIN LATERAL (
            SELECT event_id, kind FROM token_events e
            WHERE e.tenant_id = $1 AND e.token_id = p.token_id AND e.seq = p.seq
            OFFSET 0
        ) e
    ) e
), ins AS (
    INSERT INTO webhook_deliveries (tenant_id, endpoint_id, pos, event_id, state)
    SELECT tenant_id, endpoint_id, pos, event_id, 'pending' FROM ev
    WHERE cardinality(event_types) = 0 OR kind = ANY (event_types)
    ON CONFLICT DO NOTHING
    RETURNING 1
), moved AS (
    UPDATE webhook_endpoints w SET feed_pos = m.pos
    FROM (SELECT tenant_id, endpoint_id, max(pos) AS pos FROM ev GROUP BY tenant_id, endpoint_id) m
    WHERE w.tenant_id = $1 AND w.tenant_id = m.tenant_id AND w.id = m.endpoint_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM ins)`

// dueTenantsSQL is the tenants with deliveries due now, by name, each with
// what it has in flight on every instance together (leases not run out, on
// all its endpoints, disabled ones too, as claimPickSQL counts them). It looks
// up each enabled endpoint's first due delivery in the endpoint's due index
// (webhook_deliveries_endpoint_due), skipping only those in flight, and a
// due tenant's leases in webhook_deliveries_leased, so it costs one short
// index probe per endpoint whatever the backlog: it runs before any claim
// lock is taken, and no claim waits behind it.
const dueTenantsSQL = `
SELECT due.tenant_id, f.busy FROM (
    SELECT w.tenant_id FROM webhook_endpoints w
    WHERE w.enabled AND EXISTS (
        SELECT 1 FROM webhook_deliveries d
        WHERE d.tenant_id = w.tenant_id AND d.endpoint_id = w.id AND d.state = 'pending'
          AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until <= now()))
    GROUP BY w.tenant_id
) due
CROSS JOIN LATERAL (
    SELECT count(*) AS busy FROM webhook_deliveries b
    WHERE b.tenant_id = due.tenant_id AND b.state = 'pending'
      AND b.leased_until IS NOT NULL AND b.leased_until > now()
) f
ORDER BY due.tenant_id`

// claimLockSQL is what every instance of this release takes before it
// claims: the lock of the previous releases' claims (one for the whole
// database) in shared mode, so that this release's claims never wait for
// one another on it, while a previous release's instance, which takes it
// exclusively, still excludes them during a rolling upgrade.
const claimLockSQL = `SELECT pg_advisory_xact_lock_shared(hashtextextended('tokend.webhooks.claim', 0))`

// claimTenantLockSQL tries to take tenant $1's claim lock for the rest of
// the transaction: claims of one tenant are serialized across instances, so
// that what its endpoints and it have in flight is counted right, and
// claims of different tenants run side by side. Not had (another instance
// is claiming that tenant's deliveries right now), the tenant is left to
// that instance this round: no claim waits for another's.
const claimTenantLockSQL = `SELECT pg_try_advisory_xact_lock(hashtextextended('tokend.webhooks.claim:' || $1, 0))`

// claimLockTimeoutSQL bounds, for the rest of a claim's transaction (after
// claimLockSQL), each wait for a delivery's row lock: a tenant whose rows an
// operator's disable or redeliver holds is skipped this round (store.Claim
// answers an error LockNotAvailable reports) instead of holding its claim
// lock while the other instances skip it.
const claimLockTimeoutSQL = `SET LOCAL lock_timeout = '50ms'`

// claimPickSQL picks up to $1 due deliveries of tenant $4's enabled
// endpoints for a claim to lease (claimLeaseSQL), and whether each
// endpoint is failing (suspect: its last attempt failed). An endpoint has
// at most $2 deliveries in flight, a failing one at most 1 (a probe), and
// the tenant at most $3, on all instances together (leases not run out,
// on every endpoint of the tenant, disabled ones too: an attempt in flight
// counts until it is recorded); at most $5 of the pick go to failing
// endpoints; a pick takes every endpoint's first delivery before any
// endpoint's second. An endpoint's due deliveries are taken in the order
// of its due index (webhook_deliveries_endpoint_due: next_attempt_at, then
// as stored), at most $2 of each, never sorted by position as well: an
// endpoint just enabled has its whole backlog due at one instant, and a
// sort by position read all of it (20,000 rows a claim in R3 of issue 48,
// up to 0.5 s); now a pick reads what it answers.
//
// It only reads: the claim's transaction holds the tenant's claim lock
// (claimTenantLockSQL), so what it picked is still due when claimLeaseSQL
// leases it, unless an operator parked it meanwhile.
const claimPickSQL = `
WITH ep AS (
    SELECT w.tenant_id, w.id, w.enabled, w.failing_since IS NOT NULL AS suspect,
           (SELECT count(*) FROM webhook_deliveries b
            WHERE b.tenant_id = $4 AND b.endpoint_id = w.id AND b.state = 'pending'
              AND b.leased_until IS NOT NULL AND b.leased_until > now()) AS busy
    FROM webhook_endpoints w
    WHERE w.tenant_id = $4
), tb AS (
    SELECT tenant_id, sum(busy) AS busy FROM ep GROUP BY tenant_id
), due AS (
    SELECT d.tenant_id, d.endpoint_id, d.pos, d.next_attempt_at, d.er, ep.suspect, tb.busy AS tbusy
    FROM ep JOIN tb ON tb.tenant_id = ep.tenant_id
    CROSS JOIN LATERAL (
        SELECT l.*, row_number() OVER (ORDER BY l.next_attempt_at, l.pos) AS er
        FROM (
            SELECT d.tenant_id, d.endpoint_id, d.pos, d.next_attempt_at
            FROM webhook_deliveries d
            WHERE d.tenant_id = $4 AND d.endpoint_id = ep.id AND d.state = 'pending'
              AND d.next_attempt_at <= now() AND (d.leased_until IS NULL OR d.leased_until <= now())
            ORDER BY d.next_attempt_at
            LIMIT $2
        ) l
    ) d
    WHERE ep.enabled AND d.er + ep.busy <= CASE WHEN ep.suspect THEN 1 ELSE $2 END
), kept AS (
    SELECT * FROM (
        SELECT due.*, row_number() OVER (PARTITION BY suspect ORDER BY er, next_attempt_at, pos) AS sr
        FROM due
    ) k
    WHERE NOT suspect OR sr <= $5
), ranked AS (
    SELECT tenant_id, endpoint_id, pos, next_attempt_at,
           tbusy + row_number() OVER (PARTITION BY tenant_id ORDER BY er, next_attempt_at, pos) AS tr
    FROM kept
)
SELECT endpoint_id, pos FROM ranked
WHERE tr <= $3
ORDER BY tr, next_attempt_at
LIMIT $1`

// claimLeaseSQL leases for $2 seconds tenant $1's delivery at endpoint $3
// and position $4 (one claimPickSQL picked), counting the attempt, and
// answers what sending it needs; nothing when it is no longer due, or its
// endpoint was disabled since the pick (the previous release parked the
// delivery then; this one reads the flag). A claim sends one for each delivery picked,
// together in one round trip (Claim). One delivery a statement, found by
// its whole primary key, and its state tested as NOT IN the other states
// (the table's check allows no fourth), which implies none of the partial
// indexes' predicates: whatever the statistics, the plan is a probe of the
// primary key (or a scan of a table of a page or two, which Postgres sizes
// by its pages, not by its statistics). A lease of every picked delivery
// in one UPDATE joined to them was planned as a walk of each endpoint's due
// index with the position as a filter, or as a scan of the table, when the
// statistics did not know the backlog (a fresh table, an endpoint just
// enabled): 20,000 rows read for a claim of 40, 0.3–0.6 s claims in R3 of
// issue 48 (TestClaimReadsWhatItLeasesWhateverTheStatistics). The event
// is found in two steps, its position and then the event by its key: the
// two joined in one subquery were planned, on tables that had been tiny,
// as a walk of the tenant's events with the key as a filter
// (TestDeliveryStatementsStayFlatAsTheBacklogGrows).
const claimLeaseSQL = `
WITH leased AS (
    UPDATE webhook_deliveries d
    SET leased_until = now() + make_interval(secs => $2), attempts = d.attempts + 1
    WHERE d.tenant_id = $1 AND d.endpoint_id = $3 AND d.pos = $4
      AND d.state NOT IN ('delivered', 'failed', 'parked')
      AND (d.leased_until IS NULL OR d.leased_until <= now())
      AND EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.tenant_id = $1 AND e.id = $3 AND e.enabled)
    RETURNING d.tenant_id, d.endpoint_id, d.pos, d.attempts
)
SELECT l.tenant_id, l.endpoint_id, l.pos, l.attempts, w.url, w.secret_nonce, w.secret_key_id,
       CASE WHEN w.prev_secret_until > now() THEN w.prev_secret_nonce END,
       CASE WHEN w.prev_secret_until > now() THEN w.prev_secret_key_id END,
       w.failing_since IS NOT NULL,
       e.event_id, e.kind, e.token_id, coalesce(e.operation, ''), coalesce(e.subject, ''), e.actor,
       e.from_state, e.to_state, e.generation, e.outcome_status, e.outcome_body, e.at
FROM leased l
JOIN webhook_endpoints w ON w.tenant_id = $1 AND w.tenant_id = l.tenant_id AND w.id = l.endpoint_id
CROSS JOIN LATERAL (
    SELECT token_id, seq FROM event_positions p
    WHERE p.tenant_id = $1 AND p.tenant_id = l.tenant_id AND p.pos = l.pos
    OFFSET 0
) p
CROSS JOIN LATERAL (
    SELECT * FROM token_events e
    WHERE e.tenant_id = $1 AND e.token_id = p.token_id AND e.seq = p.seq
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
// the next, or fails for good past the maximum age ($8 seconds), counted
// from the later of its creation and its endpoint's last resume
// (resumed_at). The endpoint is disabled when it answered 410 Gone ($11)
// or has failed for longer than $9 seconds. A delivery of an endpoint
// disabled (now, or while it was in flight) stays pending, parked by the
// flag, and never fails for good while parked; it answers 'parked' then.
// No other delivery is written: those in flight keep their leases until
// their own attempts are recorded.
const failedSQL = `
WITH w0 AS (
    SELECT enabled AND ($11 OR least(failing_since, now()) <= (SELECT now() - make_interval(secs => $9))) AS off,
           NOT enabled AS disabled, least(failing_since, now()) AS since, resumed_at
    FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2
), d AS (
    UPDATE webhook_deliveries
    SET state = CASE WHEN (SELECT off OR disabled FROM w0) THEN 'pending'
                     WHEN greatest(created_at, (SELECT resumed_at FROM w0)) <= (SELECT now() - make_interval(secs => $8)) THEN 'failed' ELSE 'pending' END,
        finished_at = CASE WHEN NOT (SELECT off OR disabled FROM w0) AND greatest(created_at, (SELECT resumed_at FROM w0)) <= (SELECT now() - make_interval(secs => $8)) THEN (SELECT now()) END,
        next_attempt_at = now() + make_interval(secs => $7),
        leased_until = NULL
    WHERE tenant_id = $1 AND endpoint_id = $2 AND pos = $3 AND attempts = $4 AND state = 'pending'
    RETURNING CASE WHEN (SELECT off OR disabled FROM w0) THEN 'parked' ELSE state END AS state
), a AS (
    INSERT INTO webhook_attempts (tenant_id, endpoint_id, pos, attempt, status, error, duration_ms)
    VALUES ($1, $2, $3, $4, $5, $6, $10)
), w AS (
    UPDATE webhook_endpoints
    SET failing_since = (SELECT since FROM w0),
        enabled = enabled AND NOT (SELECT off FROM w0),
        disabled_reason = CASE WHEN NOT (SELECT off FROM w0) THEN disabled_reason
                               WHEN $11 THEN (SELECT 'the endpoint answered 410 Gone at ' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                               ELSE (SELECT 'every delivery failed since ' || to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') FROM w0) END
    WHERE tenant_id = $1 AND id = $2
)
SELECT coalesce((SELECT state FROM d), '')`

// parkedExpr is whether delivery d of endpoint w is parked: pending and
// not in flight while w is disabled, or left parked by the previous
// release. A delivery in flight when its endpoint was disabled is pending
// until its attempt is recorded.
const parkedExpr = `(d.state = 'parked' OR (d.state = 'pending' AND NOT w.enabled AND (d.leased_until IS NULL OR d.leased_until <= now())))`

// owedExpr is whether delivery d of endpoint w is owed and not parked
// (lag): pending on an enabled endpoint, or in flight.
const owedExpr = `(d.state = 'pending' AND (w.enabled OR d.leased_until > now()))`

// undeliveredSQL is what the metrics report, read at each scrape: the
// deliveries still owed (owedExpr; parked ones are not lag), the age of the
// oldest, counted as its maximum age is (from the later of its creation
// and its endpoint's resume), the parked ones (parkedExpr) and the
// disabled endpoints.
//
// Both counts fan out to every shard (no tenant): Citus refuses a subquery
// over a distributed table in the target list, so they are two subqueries
// in FROM, each aggregated per shard and summed on the coordinator; a
// delivery joins its endpoint on the tenant, in its shard.
const undeliveredSQL = `
SELECT d.pending, d.age, d.parked, w.disabled
FROM (SELECT count(*) FILTER (WHERE ` + owedExpr + `) AS pending,
             coalesce(extract(epoch FROM now() - min(greatest(d.created_at, w.resumed_at)) FILTER (WHERE ` + owedExpr + `)), 0)::float8 AS age,
             count(*) FILTER (WHERE ` + parkedExpr + `) AS parked
      FROM webhook_deliveries d
      JOIN webhook_endpoints w ON w.tenant_id = d.tenant_id AND w.id = d.endpoint_id
      WHERE d.state IN ('pending', 'parked')) d,
     (SELECT count(*) AS disabled FROM webhook_endpoints WHERE NOT enabled) w`

// webhookStatsSQL is tenant $1's webhook figures, for its operators only
// (GET /v1/admin/webhook-stats; /metrics, unauthenticated, names no
// tenant): per endpoint, the deliveries it is owed (pending: owedExpr, and
// parked while disabled: parkedExpr), the age of its oldest pending one
// (from the later of its creation and the endpoint's resume), and the
// delivery lag
// (event commit to 2xx) of its latest deliveries made in the last $2
// seconds (at most 200 of each endpoint), as p50 and p99 with their count.
// One tenant, one shard on Citus.
const webhookStatsSQL = `
SELECT w.id, w.url, w.enabled, w.failing_since,
       o.pending, o.parked, o.oldest,
       l.n, l.q[1], l.q[2]
FROM webhook_endpoints w
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE ` + owedExpr + `) AS pending,
           count(*) FILTER (WHERE ` + parkedExpr + `) AS parked,
           coalesce(extract(epoch FROM now() - min(greatest(d.created_at, w.resumed_at)) FILTER (WHERE ` + owedExpr + `)), 0)::float8 AS oldest
    FROM webhook_deliveries d
    WHERE d.tenant_id = $1 AND d.endpoint_id = w.id AND d.state IN ('pending', 'parked')
) o
CROSS JOIN LATERAL (
    SELECT count(*) AS n,
           coalesce(percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM r.finished_at - p.at)), ARRAY[0, 0]::float8[]) AS q
    FROM (SELECT d.pos, d.finished_at FROM webhook_deliveries d
          WHERE d.tenant_id = $1 AND d.endpoint_id = w.id AND d.state = 'delivered'
            AND d.finished_at > now() - make_interval(secs => $2)
          ORDER BY d.pos DESC
          LIMIT 200) r
    JOIN event_positions p ON p.tenant_id = $1 AND p.pos = r.pos
) l
WHERE w.tenant_id = $1
ORDER BY w.created_at, w.id`
