-- Citus only: the feed's transaction ids after distribution. Events written
-- before 013 distributed token_events carry the ids of the node they were
-- written on, now the coordinator, while the feed positions events by the
-- ids of the worker that stores them (event/sql.go): a head's cursor from
-- the coordinator's count looked ahead of the worker's and the feed was
-- rebased, handing one event a second position. Here every positioned
-- event gets xid 0, every other one xid 1, and each head's cursor (1, 0):
-- the first are behind the cursor for good, the second settled past it
-- and positioned next in seq order, and everything written from now on
-- carries its worker's ids, which are above 1. On plain Postgres nothing
-- changes.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    -- First: the heads stay locked until the migration commits, so no
    -- positioner moves a feed between the updates.
    UPDATE event_feed_heads SET xid = '1', seq = 0;
    UPDATE token_events e SET xid = '0'
    WHERE EXISTS (SELECT 1 FROM event_positions p
                  WHERE p.tenant_id = e.tenant_id AND p.token_id = e.token_id AND p.seq = e.seq);
    UPDATE token_events e SET xid = '1'
    WHERE e.xid <> '0'
      AND NOT EXISTS (SELECT 1 FROM event_positions p
                      WHERE p.tenant_id = e.tenant_id AND p.token_id = e.token_id AND p.seq = e.seq);
END
$$;
