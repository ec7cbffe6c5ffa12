-- Feed positions move out of token_events into a narrow table of their own.
--
-- Positioning an event used to set token_events.pos: an update that could not
-- be HOT (pos is indexed), so every event was written twice, with a second
-- entry in each of its indexes and a dead row for vacuum. With the dispatcher
-- positioning every 100 ms that added 27-69% to a spend (scripts/bench-outbox).
-- Now an event row is written once, and positioning inserts a narrow row here.
--
-- Which events still need a position is told by a cursor instead of a partial
-- index: events are positioned in (xid, seq) order, and only once settled
-- (xid older than the oldest transaction still running, see 004). Every
-- event below that horizon is final, and every event written later has a
-- greater xid, so a new event never sorts below the cursor.
CREATE TABLE event_positions (
    tenant_id text        NOT NULL,
    pos       bigint      NOT NULL,
    token_id  text        NOT NULL,
    seq       bigint      NOT NULL,
    -- The event's time, copied so that retention walks this table alone.
    at        timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, pos)
);
CREATE INDEX event_positions_retention ON event_positions (at);

INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
SELECT tenant_id, pos, token_id, seq, at FROM token_events WHERE pos IS NOT NULL;

-- The head's cursor: the (xid, seq) of the last event positioned.
ALTER TABLE event_feed_heads
    ADD COLUMN xid xid8   NOT NULL DEFAULT '0',
    ADD COLUMN seq bigint NOT NULL DEFAULT 0;

UPDATE event_feed_heads h
SET xid = last.xid, seq = last.seq
FROM (SELECT DISTINCT ON (tenant_id) tenant_id, xid, seq
      FROM token_events WHERE pos IS NOT NULL
      ORDER BY tenant_id, xid DESC, seq DESC) last
WHERE h.tenant_id = last.tenant_id;

-- 004 positioned in seq order, so an event without a position may sort below
-- its head's new cursor. Its transaction is older than one already
-- positioned, which was settled, so it is settled too: position it now,
-- after the head, or the cursor would pass it by.
WITH late AS (
    SELECT e.tenant_id, e.token_id, e.seq, e.at,
           h.pos + row_number() OVER (PARTITION BY e.tenant_id ORDER BY e.xid, e.seq) AS pos
    FROM token_events e
    JOIN event_feed_heads h ON h.tenant_id = e.tenant_id
    WHERE e.pos IS NULL AND (e.xid, e.seq) < (h.xid, h.seq)
)
INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
SELECT tenant_id, pos, token_id, seq, at FROM late;

UPDATE event_feed_heads h
SET pos = p.pos
FROM (SELECT tenant_id, max(pos) AS pos FROM event_positions GROUP BY tenant_id) p
WHERE h.tenant_id = p.tenant_id AND p.pos > h.pos;

DROP INDEX token_events_feed, token_events_unpositioned, token_events_retention;
ALTER TABLE token_events DROP COLUMN pos;
CREATE INDEX token_events_settling ON token_events (tenant_id, xid, seq);
