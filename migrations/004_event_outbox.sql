-- The audit trail becomes the outbox: every token event carries what a
-- consumer needs without the token (which may be purged before the event is
-- read), a stable id to deduplicate by, and, once its transaction is settled,
-- a position in its tenant's feed.
--
-- Positions are handed out after commit (event/sql.go): seq is taken inside
-- the writing transaction, so a transaction that commits late would have its
-- events appear below a cursor a reader has already passed. xid is the
-- writing transaction; an event is positioned only once every transaction
-- older than the oldest one still running has ended, so no event can show up
-- later below a position already handed out.
ALTER TABLE token_events
    ADD COLUMN event_id       text    NOT NULL DEFAULT 'evt_' || replace(gen_random_uuid()::text, '-', ''),
    ADD COLUMN operation      text,
    ADD COLUMN subject        text,
    ADD COLUMN outcome_status integer,
    ADD COLUMN xid            xid8    NOT NULL DEFAULT pg_current_xact_id(),
    ADD COLUMN pos            bigint;

-- Events written before this migration have settled long ago: position them
-- now, in the order they were written, and fill what the token still knows.
UPDATE token_events e
SET operation = t.operation, subject = t.subject
FROM tokens t
WHERE t.tenant_id = e.tenant_id AND t.id = e.token_id;

UPDATE token_events e
SET pos = p.pos
FROM (SELECT tenant_id, token_id, seq, row_number() OVER (PARTITION BY tenant_id ORDER BY seq) AS pos
      FROM token_events) p
WHERE p.tenant_id = e.tenant_id AND p.token_id = e.token_id AND p.seq = e.seq;

CREATE UNIQUE INDEX token_events_feed ON token_events (tenant_id, pos) WHERE pos IS NOT NULL;
CREATE INDEX token_events_unpositioned ON token_events (tenant_id, seq) WHERE pos IS NULL;
-- The retention sweep's path; an event enters it when it is positioned, not
-- on the spend's path.
CREATE INDEX token_events_retention ON token_events (at) WHERE pos IS NOT NULL;

-- Each tenant's feed head: the last position handed out. Positioning holds
-- this row's lock, so positions are given in one order per tenant and never
-- reused, even after retention deleted every event below them.
CREATE TABLE event_feed_heads (
    tenant_id text   NOT NULL PRIMARY KEY,
    pos       bigint NOT NULL
);
INSERT INTO event_feed_heads (tenant_id, pos)
SELECT tenant_id, max(pos) FROM token_events GROUP BY tenant_id;
