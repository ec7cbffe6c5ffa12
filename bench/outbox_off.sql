-- bench/outbox_off.sql: the outbox's additions turned off, for the "none"
-- side of scripts/bench-outbox and scripts/bench-cpu outbox: the settling
-- index of migration 008 dropped, and the per-event trigger of migrations
-- 012 and 014 (xid, event_id, seq) disabled, so those two columns stay null.
-- bench/outbox_on.sql undoes it.
DROP INDEX token_events_settling;
ALTER TABLE token_events DISABLE TRIGGER token_events_xid,
    ALTER COLUMN event_id DROP NOT NULL, ALTER COLUMN xid DROP NOT NULL;
