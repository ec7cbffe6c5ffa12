-- bench/outbox_on.sql: undoes bench/outbox_off.sql, filling the columns the
-- "none" side left null first.
UPDATE token_events SET event_id = 'evt_' || replace(gen_random_uuid()::text, '-', ''), xid = pg_current_xact_id()
WHERE event_id IS NULL;
ALTER TABLE token_events ENABLE TRIGGER token_events_xid,
    ALTER COLUMN event_id SET NOT NULL, ALTER COLUMN xid SET NOT NULL;
ALTER TABLE tokens ENABLE TRIGGER tokens_event_xid;
CREATE INDEX token_events_settling ON token_events (tenant_id, xid, seq);
VACUUM token_events;
