-- bench/outbox_off.sql: the outbox's additions turned off, for the "none"
-- side of scripts/bench-outbox and scripts/bench-cpu outbox: the settling
-- index of migration 008 dropped, the per-event trigger of migrations
-- 012 and 014 (xid, event_id, seq) disabled, so those two columns stay null,
-- and the per-change trigger on tokens of migration 022 (event_xid) too.
-- bench/outbox_on.sql undoes it.
DROP INDEX token_events_settling;
ALTER TABLE token_events DISABLE TRIGGER token_events_xid,
    ALTER COLUMN event_id DROP NOT NULL, ALTER COLUMN xid DROP NOT NULL;
ALTER TABLE tokens DISABLE TRIGGER tokens_event_xid;
