-- An event takes the xid of the token's event before it from the token's
-- row, not from a read of token_events (issue 43, item 4).
--
-- Migration 020 gives an event the greater of its transaction's id and the
-- xid of the token's last event, which the trigger read with a query of
-- its own: an SPI call per event, about a quarter of Postgres' CPU per
-- spend (bench/results/issue43.md, section 11). Every event is written in
-- a transaction that has just inserted or changed its token's row, whose
-- lock orders them. So the row now carries that xid: event_xid, the
-- greatest xid any of the token's events may have so far.
--
-- - A new token starts at 0 (the column's default; no event yet).
-- - Each change of a token sets it to the greater of the old value and the
--   changing transaction's id (tokens_event_xid), with 020's rule: an xid
--   at or above the node's next id is not this node's and is not taken
--   over. An UPDATE's trigger reads OLD, which costs no query.
-- - This release's record statements give an event's xid as its token's
--   event_xid, and token_events_xid keeps it when it is later than the
--   writer's own id (the same rule again), without reading the table.
--
-- Expand only: the previous release's statements name no xid, and the
-- trigger then reads the token's last event as 020 did, so both releases
-- order one token's events alike while they run side by side. A token
-- written before this migration has no event_xid (NULL: its events before
-- the migration are not counted in it) and keeps 020's read until it is
-- purged: the trigger on tokens skips it (WHEN), and its events name a
-- NULL xid.
--
-- On Citus each trigger runs on the shard, on the worker storing the row,
-- as token_events' does (012): citus.enable_unsafe_triggers lets the
-- trigger on tokens be created there; it reads nothing but its own row.
-- Citus refuses a function command after a parallel operation on a
-- distributed table in one transaction: the functions come first, and the
-- shards are altered one connection at a time (multi_shard_modify_mode).
SELECT set_config('citus.multi_shard_modify_mode', 'sequential', true);

-- 020's read of the token's last event, for a statement that gives no xid
-- (the previous release's, a token from before this migration), in a
-- function of its own so that only that read pays for its setting:
-- enable_seqscan is off for it, as in 020 (a plan made while token_events
-- was empty and vacuumed would scan the table for every event). It reads
-- the table the trigger fires on (on Citus the shard), named by its oid:
-- a name argument would give the function the collation "C", under which
-- the key's index, of the default collation, does not serve the read.
CREATE FUNCTION token_events_last_xid(tab regclass, tenant text, token text) RETURNS xid8
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    last xid8;
BEGIN
    IF tab = to_regclass('token_events') THEN
        SELECT e.xid INTO last FROM token_events e
        WHERE e.tenant_id = tenant AND e.token_id = token
        ORDER BY e.seq DESC
        LIMIT 1;
    ELSE
        EXECUTE format('SELECT e.xid FROM %s e WHERE e.tenant_id = $1 AND e.token_id = $2 ORDER BY e.seq DESC LIMIT 1', tab)
            INTO last USING tenant, token;
    END IF;
    RETURN last;
END
$$;

-- As 020's, but an xid the statement gives (its token's event_xid) stands
-- for the token's last event, and no query runs.
CREATE OR REPLACE FUNCTION token_events_xid() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    own xid8 := pg_current_xact_id();
    prior xid8 := NEW.xid;
BEGIN
    IF NEW.event_id IS NULL THEN
        NEW.event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    END IF;
    NEW.seq := nextval('token_events_seq_seq');
    IF prior IS NULL THEN
        prior := token_events_last_xid(TG_RELID, NEW.tenant_id, NEW.token_id);
    END IF;
    NEW.xid := own;
    IF prior > own AND prior < pg_snapshot_xmax(pg_current_snapshot()) THEN
        NEW.xid := prior;
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION tokens_event_xid() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    own xid8 := pg_current_xact_id();
BEGIN
    NEW.event_xid := own;
    IF OLD.event_xid > own AND OLD.event_xid < pg_snapshot_xmax(pg_current_snapshot()) THEN
        NEW.event_xid := OLD.event_xid;
    END IF;
    RETURN NEW;
END
$$;

ALTER TABLE tokens ADD COLUMN event_xid xid8;

ALTER TABLE tokens ALTER COLUMN event_xid SET DEFAULT '0';

SELECT set_config('citus.enable_unsafe_triggers', 'on', true);

CREATE TRIGGER tokens_event_xid BEFORE UPDATE ON tokens
    FOR EACH ROW WHEN (OLD.event_xid IS NOT NULL) EXECUTE FUNCTION tokens_event_xid();
