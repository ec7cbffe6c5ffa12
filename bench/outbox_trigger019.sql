-- bench/outbox_trigger019.sql: the trigger token_events_xid as migration 014
-- left it, before migration 020 made an event take the xid of the token's
-- event before it when that is later (one index probe of the token's last
-- event per row), for the "written019" side of scripts/bench-cpu outbox:
-- what 020 costs a spend. migrations/020_feed_token_order.sql restores it.
CREATE OR REPLACE FUNCTION token_events_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.xid := pg_current_xact_id();
    IF NEW.event_id IS NULL THEN
        NEW.event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    END IF;
    NEW.seq := nextval('token_events_seq_seq');
    RETURN NEW;
END
$$;
