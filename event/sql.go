package event

// pendingSQL tells whether the tenant has settled events without a position,
// so that a read with nothing new takes no lock and writes nothing.
const pendingSQL = `
SELECT EXISTS (
    SELECT 1 FROM token_events
    WHERE tenant_id = $1 AND pos IS NULL AND xid < pg_snapshot_xmin(pg_current_snapshot())
)`

// lockHeadSQL locks the tenant's feed head, creating it on first use, and
// answers the last position handed out.
const lockHeadSQL = `
INSERT INTO event_feed_heads AS h (tenant_id, pos) VALUES ($1, 0)
ON CONFLICT (tenant_id) DO UPDATE SET pos = h.pos
RETURNING pos`

// positionSQL numbers up to $3 settled events after the head $2, in the
// order they were written, and moves the head. It runs with the head locked.
const positionSQL = `
WITH settled AS (
    SELECT token_id, seq, row_number() OVER (ORDER BY seq) AS n
    FROM (SELECT token_id, seq FROM token_events
          WHERE tenant_id = $1 AND pos IS NULL AND xid < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY seq
          LIMIT $3) s
), numbered AS (
    UPDATE token_events e SET pos = $2::bigint + settled.n
    FROM settled
    WHERE e.tenant_id = $1 AND e.token_id = settled.token_id AND e.seq = settled.seq
    RETURNING e.pos
)
UPDATE event_feed_heads SET pos = (SELECT coalesce(max(pos), $2::bigint) FROM numbered)
WHERE tenant_id = $1
RETURNING pos - $2::bigint`

// readSQL is one page of the feed.
const readSQL = `
SELECT pos, event_id, token_id, coalesce(operation, ''), coalesce(subject, ''), kind, actor,
       from_state, to_state, generation, outcome_status, outcome_body, at
FROM token_events
WHERE tenant_id = $1 AND pos > $2
ORDER BY pos
LIMIT $3`
