package event

import "strconv"

// Events are positioned in (xid, seq) order behind the cursor kept in their
// tenant's feed head (migrations/008_event_positions.sql): xid orders the
// writing transactions, and only settled ones, older than the oldest still
// running, are taken, so no event can later appear behind the cursor.

// pendingSQL tells whether the tenant has settled events past its head's
// cursor, so that a read with nothing new takes no lock and writes nothing.
// It looks at the first event past the cursor only: in (xid, seq) order, if
// that one's transaction has not settled, no later one has. It also tells
// when the feed must be rebased (aheadSQL).
const pendingSQL = `
SELECT EXISTS (
    SELECT 1 FROM (
        SELECT e.xid FROM token_events e
        WHERE e.tenant_id = $1
          AND (e.xid, e.seq) > (SELECT coalesce(max(h.xid), '0'), coalesce(max(h.seq), 0)
                                FROM event_feed_heads h WHERE h.tenant_id = $1)
        ORDER BY e.xid, e.seq
        LIMIT 1
    ) first
    WHERE first.xid < pg_snapshot_xmin(pg_current_snapshot())
) OR ` + aheadSQL

// aheadSQL is true when the tenant's feed holds a transaction id this
// server has not handed out yet: its head's cursor, or an event's. On a
// live server that cannot be; it is a database restored into another
// cluster (pg_dump, a logical copy), whose counter starts below the ids the
// feed was positioned by. Then the new events would sort below the cursor
// and never be positioned, and events positioned before the restore would
// sort above it and be positioned again: the feed is rebased (rebaseSQL).
// An upgrade in place (pg_upgrade) keeps the counter and is not a restore.
const aheadSQL = `coalesce(greatest(
    (SELECT max(h.xid) FROM event_feed_heads h WHERE h.tenant_id = $1),
    (SELECT max(e.xid) FROM token_events e WHERE e.tenant_id = $1)
) >= pg_snapshot_xmax(pg_current_snapshot()), false)`

// rebaseSQL rebases a tenant's feed onto this cluster's transaction ids, with
// the head locked at position $2: it positions every event visible and still
// without a position, in seq order (an identity that pg_dump carries over,
// so writes before and after the restore keep their order), marks with xid
// 0 every positioned event whose xid is not below this server's horizon,
// and moves the head's cursor to just below the horizon. Every event then
// past the cursor is one without a position, written on this cluster. It
// walks the tenant's whole trail, once after a restore.
const rebaseSQL = `
WITH horizon AS (
    SELECT (pg_snapshot_xmin(pg_current_snapshot())::text::numeric - 1)::text::xid8 AS xid
), lost AS (
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
    FROM horizon
    WHERE e.tenant_id = $1 AND e.xid > horizon.xid
      AND (EXISTS (SELECT 1 FROM event_positions p
                   WHERE p.tenant_id = $1 AND p.token_id = e.token_id AND p.seq = e.seq)
           OR EXISTS (SELECT 1 FROM lost l WHERE l.token_id = e.token_id AND l.seq = e.seq))
)
UPDATE event_feed_heads h
SET pos = $2::bigint + (SELECT count(*) FROM lost), xid = horizon.xid, seq = 9223372036854775807
FROM horizon
WHERE h.tenant_id = $1
RETURNING h.pos - $2::bigint`

// headsSQL answers, for each tenant of $1, its head position and whether
// it has settled events to position or must be rebased, by pendingSQL's
// test.
const headsSQL = `
SELECT t.id, coalesce(h.pos, 0), EXISTS (
    SELECT 1 FROM (
        SELECT e.xid FROM token_events e
        WHERE e.tenant_id = t.id
          AND (e.xid, e.seq) > (coalesce(h.xid, '0'), coalesce(h.seq, 0))
        ORDER BY e.xid, e.seq
        LIMIT 1
    ) first
    WHERE first.xid < pg_snapshot_xmin(pg_current_snapshot())
) OR coalesce(greatest(h.xid, (SELECT max(e.xid) FROM token_events e WHERE e.tenant_id = t.id))
              >= pg_snapshot_xmax(pg_current_snapshot()), false)
FROM unnest($1::text[]) AS t(id)
LEFT JOIN event_feed_heads h ON h.tenant_id = t.id`

// notifySQL tells listeners that tenant $1's feed moved.
const notifySQL = `SELECT pg_notify('` + NotifyChannel + `', $1)`

// lockHeadSQL locks the tenant's feed head, creating it on first use, and
// answers the last position handed out, the cursor after which events
// still wait for one, and whether the feed must be rebased (aheadSQL).
const lockHeadSQL = `
INSERT INTO event_feed_heads AS h (tenant_id, pos) VALUES ($1, 0)
ON CONFLICT (tenant_id) DO UPDATE SET pos = h.pos
RETURNING pos, xid::text, seq, ` + aheadSQL

// positionSQL numbers up to $5 settled events after the head's cursor
// ($3, $4) from position $2 + 1, and moves the head past them. It runs with
// the head locked.
const positionSQL = `
WITH settled AS (
    SELECT token_id, xid, seq, at, row_number() OVER (ORDER BY xid, seq) AS n
    FROM (SELECT token_id, xid, seq, at FROM token_events
          WHERE tenant_id = $1 AND (xid, seq) > ($3::text::xid8, $4::bigint)
            AND xid < pg_snapshot_xmin(pg_current_snapshot())
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

// readSQL is one page of the feed: up to $3 events after position $2, cut
// to the byte budget $4. It is written for generic plans, which cannot see
// $3: the constant inner LIMIT (MaxLimit) makes walking the positions' key
// the cheap way to a page, and OFFSET 0 keeps the event lookup a subquery
// run per position, by the event's key, so that no plan hashes the tenant's
// whole trail to join a page of it.
//
// An event's size is the sum of its stored fields' lengths; octet_length
// of a stored body reads its length, not the body. The window runs over the
// page of $3 only, and the first event is always taken.
var readSQL = `
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
              LIMIT ` + strconv.Itoa(MaxLimit) + `) p
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

// headSQL is the last position handed out in the tenant's feed, 0 before
// the first.
const headSQL = `SELECT coalesce(max(pos), 0) FROM event_feed_heads WHERE tenant_id = $1`

// stallSQL answers how long the oldest transaction that holds every feed
// back has been open (seconds, 0 when none): the oldest running one with a
// transaction id, on any database of the server (ids are server-wide), or
// a prepared one. pg_stat_activity shows other roles' transactions only to
// a role with pg_read_all_stats.
const stallSQL = `
SELECT coalesce(extract(epoch FROM now() - least(
    (SELECT min(xact_start) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()),
    (SELECT min(prepared) FROM pg_prepared_xacts))), 0)::float8`

// heldSQL answers, for each tenant with a feed head, how long its oldest
// event held back is waiting: committed, past the head's cursor, and
// written by a transaction not yet settled. Events merely not yet read
// (settled, waiting for a reader to position them) are not held back. It
// reads one event per tenant, the first past the horizon.
const heldSQL = `
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
