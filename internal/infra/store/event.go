package store

import "strconv"

// The event feed's statements (package event runs them through the typed
// functions of event_exec.go).

// FeedChannel is the channel a transaction that gives feed positions
// notifies on, with the tenant as payload (event.NotifyChannel).
const FeedChannel = "tokend_event_feed"

// FeedMaxLimit is the most events one read of the feed answers
// (event.MaxLimit): feedReadSQL's constant inner LIMIT.
const FeedMaxLimit = 1000

// Events are positioned in (xid, seq) order behind the cursor kept in their
// tenant's feed head (migrations/008_event_positions.sql): xid orders the
// writing transactions, and only settled ones, older than the oldest still
// running, are taken, so no event can later appear behind the cursor. An
// event's xid is the greater of its writer's id and that of the token's
// event before it (migrations/020_feed_token_order.sql), so that one
// token's events sort in the order its row lock gave them.

// Every statement here that reads the transaction id horizon
// (pg_current_snapshot) is a SELECT routed to one tenant: it reads a tenant
// table filtered by tenant_id = $1 and nothing else, so on Citus it runs
// whole on the worker that stores the tenant's shards, whose transaction
// ids are the ones its events carry (a trigger sets token_events.xid where
// the row is stored, migrations/012_event_xid_where_stored.sql). The
// statements that modify pass the horizon in as parameters: Citus evaluates
// the functions of an INSERT, UPDATE or DELETE on the coordinator, whose ids
// number other transactions. A horizon read by an earlier statement of the
// same transaction is conservative: every transaction below it had ended
// before that statement, so its events are visible to later ones.

// feedHorizonSQL answers tenant $1's horizon (the xmin and xmax of a snapshot
// taken on the node that stores the tenant's events), its head (position,
// cursor and epoch), whether it has settled events past the head's cursor,
// whether the feed must be rebased (ahead), this node's identity (feedNodeSQL)
// and whether the head has none recorded yet (adopt: written before
// migration 017). A read with nothing new takes no lock and writes nothing. It looks at the first event past the cursor
// only: in (xid, seq) order, if that one's transaction has not settled, no
// later one has.
//
// Ahead is true when the feed holds a transaction id this node cannot have
// handed out yet: its head's cursor at or above the oldest transaction
// running (on a live node every later horizon is above the cursor, which
// was below one), or an event at or above the next id. That is a database
// restored into another cluster (pg_dump, a logical copy), or on Citus a
// tenant's shards moved to another worker, whose counter differs from the
// ids the feed was positioned by: new events could sort below the cursor
// and never be positioned, and events positioned before would sort above it
// and be positioned again. The feed is then rebased (feedRebaseSQL). Ahead is
// also true when the head was positioned on another node (feedNodeSQL): a
// restore into a cluster whose counter is ahead of the source's, or a
// point-in-time recovery, keeps every id plausible, yet a reader may hold a
// cursor past the restored head, taken on the source after the backup.
const feedHorizonSQL = `
SELECT hz.xmin::text, hz.xmax::text, hz.pos, hz.epoch, hz.node_now,
       hz.heads > 0 AND hz.node IS NULL,
       EXISTS (
           SELECT 1 FROM (
               SELECT e.xid FROM token_events e
               WHERE e.tenant_id = $1 AND (e.xid, e.seq) > (hz.xid, hz.seq)
               ORDER BY e.xid, e.seq
               LIMIT 1
           ) first
           WHERE first.xid < hz.xmin),
       coalesce(hz.xid >= hz.xmin
                OR (SELECT max(e.xid) FROM token_events e WHERE e.tenant_id = $1) >= hz.xmax, false)
       OR coalesce(hz.node <> hz.node_now, false)
FROM (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin, pg_snapshot_xmax(pg_current_snapshot()) AS xmax,
           coalesce(max(h.pos), 0) AS pos, coalesce(max(h.xid), '0') AS xid, coalesce(max(h.seq), 0) AS seq,
           coalesce(max(h.epoch), '') AS epoch, max(h.node) AS node, count(*) AS heads,
           ` + feedNodeSQL + ` AS node_now
    FROM event_feed_heads h
    WHERE h.tenant_id = $1
) hz`

// feedNodeSQL is the identity of the node a statement runs on: the cluster's
// system identifier, which initdb draws at random (pg_dump into another
// cluster changes it, whatever the target's transaction counter), and the
// WAL timeline of the current insert position, which a point-in-time
// recovery or a standby's promotion moves to a new one. In feedHorizonSQL, a
// SELECT routed to one tenant, it is the node that stores the tenant (on
// Citus, its worker). pg_upgrade makes a new cluster too: it starts a new
// epoch, which costs a reader nothing, no cursor being ahead of the feed.
//
// pg_control_system reads the control file: the answer is kept in the
// backend's session (tokend.node), as a backend's node cannot change under
// it. A restore or a point-in-time recovery restarts the server, and on a
// standby, where a backend could live through a promotion,
// pg_current_wal_lsn fails, so nothing is kept from before one.
const feedNodeSQL = `coalesce(nullif(current_setting('tokend.node', true), ''), set_config('tokend.node',
    (SELECT system_identifier::text FROM pg_control_system()) || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), false))`

// feedRebaseSQL rebases a tenant's feed onto this node's transaction ids, with
// the head locked at position $2 and horizon (xmin) $3: it positions every
// event visible and still without a position, in seq order (an identity
// that pg_dump and a shard move carry over, so writes before and after keep
// their order), marks with xid 0 every positioned event whose xid is not
// below the horizon, and moves the head's cursor to just below the horizon.
// Every event then past the cursor is one without a position, written on
// this node. It walks the tenant's whole trail, once after a restore.
//
// The feed starts a new epoch $4 at the head's position: positions up to it
// are the ones the feed had before, and those after it may have been handed
// out to other events before the restore. The epoch it ends is kept, with
// the position it started at, so that a cursor of any earlier epoch is
// judged (see event.Epoch). $5 is the node the feed now runs on (feedNodeSQL).
const feedRebaseSQL = `
WITH lost AS (
    SELECT e.token_id, e.seq, e.at, row_number() OVER (ORDER BY e.seq) AS n
    FROM token_events e
    WHERE e.tenant_id = $1
      AND NOT EXISTS (SELECT 1 FROM event_positions p
                      WHERE p.tenant_id = $1 AND p.token_id = e.token_id AND p.seq = e.seq)
), numbered AS (
    INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
    SELECT $1, $2::bigint + n, token_id, seq, at FROM lost
), marked AS (
    UPDATE token_events e SET xid = '0'
    WHERE e.tenant_id = $1 AND e.xid >= $3::text::xid8
      AND (EXISTS (SELECT 1 FROM event_positions p
                   WHERE p.tenant_id = $1 AND p.token_id = e.token_id AND p.seq = e.seq)
           OR EXISTS (SELECT 1 FROM lost l WHERE l.token_id = e.token_id AND l.seq = e.seq))
)
UPDATE event_feed_heads h
SET pos = $2::bigint + (SELECT count(*) FROM lost),
    xid = ($3::text::numeric - 1)::text::xid8, seq = 9223372036854775807,
    prior_epochs = coalesce(h.prior_epochs, '{}') || coalesce(h.epoch, ''),
    prior_bases = coalesce(h.prior_bases, '{}') || coalesce(h.epoch_base, 0),
    epoch = $4, epoch_base = $2::bigint, node = $5
WHERE h.tenant_id = $1
RETURNING h.pos - $2::bigint`

// feedNotifySQL tells listeners that tenant $1's feed moved. It reads no table,
// so on Citus it runs on the coordinator, where tokend's instances listen.
const feedNotifySQL = `SELECT pg_notify('` + FeedChannel + `', $1)`

// feedLockHeadSQL locks the tenant's feed head, creating it on first use in
// epoch $2 on node $3, recording node $3 on a head that has none, and
// answers the last position handed out and the cursor after which events
// still wait for one.
const feedLockHeadSQL = `
INSERT INTO event_feed_heads AS h (tenant_id, pos, epoch, epoch_base, node) VALUES ($1, 0, $2, 0, $3)
ON CONFLICT (tenant_id) DO UPDATE SET pos = h.pos, node = coalesce(h.node, $3)
RETURNING pos, xid::text, seq`

// feedPositionSQL numbers up to $5 events after the head's cursor ($3, $4) whose
// transactions ended before horizon $6, from position $2 + 1, and moves the
// head past them. It runs with the head locked.
const feedPositionSQL = `
WITH settled AS (
    SELECT token_id, xid, seq, at, row_number() OVER (ORDER BY xid, seq) AS n
    FROM (SELECT token_id, xid, seq, at FROM token_events
          WHERE tenant_id = $1 AND (xid, seq) > ($3::text::xid8, $4::bigint)
            AND xid < $6::text::xid8
          ORDER BY xid, seq
          LIMIT $5) s
), numbered AS (
    INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
    SELECT $1, $2::bigint + n, token_id, seq, at FROM settled
), last AS (
    SELECT xid, seq, n FROM settled ORDER BY n DESC LIMIT 1
)
UPDATE event_feed_heads h SET pos = $2::bigint + last.n, xid = last.xid, seq = last.seq
FROM last
WHERE h.tenant_id = $1
RETURNING last.n`

// feedReadSQL is one page of the feed: up to $3 events after position $2, cut
// to the byte budget $4. It is written for generic plans, which cannot see
// $3: the constant inner LIMIT (FeedMaxLimit) makes walking the positions' key
// the cheap way to a page, and OFFSET 0 keeps the event lookup a subquery
// run per position, by the event's key, so that no plan hashes the tenant's
// whole trail to join a page of it.
//
// An event's size is the sum of its stored fields' lengths; octet_length
// of a stored body reads its length, not the body. The window runs over the
// page of $3 only, and the first event is always taken.
var feedReadSQL = `
SELECT pos, event_id, token_id, operation, subject, kind, actor,
       from_state, to_state, generation, outcome_status, outcome_body, at
FROM (
    SELECT page.*, row_number() OVER w AS n, sum(size) OVER w AS upto
    FROM (
        SELECT p.pos, e.event_id, e.token_id, coalesce(e.operation, '') AS operation, coalesce(e.subject, '') AS subject,
               e.kind, e.actor, e.from_state, e.to_state, e.generation, e.outcome_status, e.outcome_body, e.at,
               octet_length(e.event_id) + octet_length(e.token_id) + coalesce(octet_length(e.operation), 0)
                 + coalesce(octet_length(e.subject), 0) + octet_length(e.kind) + octet_length(e.actor)
                 + coalesce(octet_length(e.outcome_body), 0) AS size
        FROM (SELECT pos, token_id, seq FROM event_positions
              WHERE tenant_id = $1 AND pos > $2
              ORDER BY pos
              LIMIT ` + strconv.Itoa(FeedMaxLimit) + `) p
        CROSS JOIN LATERAL (
            SELECT * FROM token_events e
            WHERE e.tenant_id = $1 AND e.token_id = p.token_id AND e.seq = p.seq
            OFFSET 0
        ) e
        ORDER BY p.pos
        LIMIT $3
    ) page
    WINDOW w AS (ORDER BY pos)
) sized
WHERE n = 1 OR upto <= $4
ORDER BY pos`

// feedHeadSQL is the tenant's feed head: the last position handed out (0 before
// the first), the epoch and the position it started at, and the epochs
// before it with theirs, oldest first.
const feedHeadSQL = `
SELECT coalesce(max(pos), 0), coalesce(max(epoch), ''), coalesce(max(epoch_base), 0),
       coalesce(max(prior_epochs), '{}'), coalesce(max(prior_bases), '{}')
FROM event_feed_heads WHERE tenant_id = $1`

// feedStallSQL answers how long the oldest transaction that holds every feed
// back has been open (seconds, 0 when none): the oldest running one with a
// transaction id, on any database of the server (ids are server-wide), or
// a prepared one. pg_stat_activity shows other roles' transactions only to
// a role with pg_read_all_stats.
const feedStallSQL = `
SELECT coalesce(extract(epoch FROM now() - least(
    (SELECT min(xact_start) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()),
    (SELECT min(prepared) FROM pg_prepared_xacts))), 0)::float8`

// feedHeldSQL answers, for each tenant with a feed head, how long its oldest
// event held back is waiting: committed, past the head's cursor, and
// written by a transaction not yet settled. Events merely not yet read
// (settled, waiting for a reader to position them) are not held back. It
// reads one event per tenant, the first past the horizon.
const feedHeldSQL = `
SELECT h.tenant_id, extract(epoch FROM now() - first.at)::float8
FROM event_feed_heads h
CROSS JOIN LATERAL (
    SELECT e.at FROM token_events e
    WHERE e.tenant_id = h.tenant_id
      AND e.xid >= pg_snapshot_xmin(pg_current_snapshot())
      AND (e.xid, e.seq) > (h.xid, h.seq)
    ORDER BY e.xid, e.seq
    LIMIT 1
) first`
