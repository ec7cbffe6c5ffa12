package event

import "strconv"

// Events are positioned in (xid, seq) order behind the cursor kept in their
// tenant's feed head (migrations/008_event_positions.sql): xid orders the
// writing transactions, and only settled ones, older than the oldest still
// running, are taken, so no event can later appear behind the cursor.

// pendingSQL tells whether the tenant has settled events past its head's
// cursor, so that a read with nothing new takes no lock and writes nothing.
// It looks at the first event past the cursor only: in (xid, seq) order, if
// that one's transaction has not settled, no later one has.
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
)`

// lockHeadSQL locks the tenant's feed head, creating it on first use, and
// answers the last position handed out and the cursor after which events
// still wait for one.
const lockHeadSQL = `
INSERT INTO event_feed_heads AS h (tenant_id, pos) VALUES ($1, 0)
ON CONFLICT (tenant_id) DO UPDATE SET pos = h.pos
RETURNING pos, xid::text, seq`

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

// readSQL is one page of the feed. It is written for generic plans, which
// cannot see $3: the constant inner LIMIT (MaxLimit) makes walking the
// positions' key the cheap way to a page, and OFFSET 0 keeps the event
// lookup a subquery run per position, by the event's key, so that no plan
// hashes the tenant's whole trail to join a page of it.
var readSQL = `
SELECT p.pos, e.event_id, e.token_id, coalesce(e.operation, ''), coalesce(e.subject, ''), e.kind, e.actor,
       e.from_state, e.to_state, e.generation, e.outcome_status, e.outcome_body, e.at
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
LIMIT $3`
