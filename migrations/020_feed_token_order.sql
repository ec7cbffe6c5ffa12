-- Each token's events reach the feed in the order its row lock gave them
-- (docs/robustness.md, defect 1).
--
-- The feed positions events in (xid, seq) order, once xid is below the
-- oldest transaction still running (event/doc.go). A transaction id is not
-- a commit order: a transaction that took its id, then waited for a
-- token's row lock (an UPDATE takes its id before it waits) while a newer
-- one changed the token and committed, wrote the token's later change with
-- the older id, and the feed served it first.
--
-- So an event's xid is now the greater of its transaction's id and the xid
-- of the token's event before it. Along one token's events, in the order
-- the row lock serialized them, xid never decreases and seq increases
-- (nextval under the lock), so the feed's (xid, seq) order is the token's
-- order. Nothing else changes: xid is never below the writer's id, so an
-- event still settles only once its writer has ended (it waits too for the
-- earlier event's writer, which has ended already), and an event not yet
-- visible still has an xid above every settled one, so none can land
-- behind the cursor. The feed's statements are unchanged, and the previous
-- release positions the same way.
--
-- The earlier event is the token's last by seq, read from the table the
-- trigger fires on: on Citus that is the shard, where the trigger runs
-- (token_events on a worker names the distributed table, which a trigger
-- must not query), so its name comes from TG_TABLE_NAME; on one Postgres,
-- token_events itself, read by a statement whose plan the session keeps.
-- An xid at or above the node's next id is not this node's (a restore into
-- another cluster, a shard moved from another worker) and is not taken
-- over: the feed rebases such a tenant (event/doc.go, Epochs).
--
-- enable_seqscan is off inside the function: the session keeps the read's
-- generic plan, and one made while token_events was empty and vacuumed (a
-- new database) scans the table for every event, each insert slower than
-- the last (bench-cpu outbox's load of 125,000 events never ended). The
-- primary key (tenant_id, token_id, seq) finds the last event in one probe
-- (event.TestEventTakesItsTokensLaterXid counts the scans).
CREATE OR REPLACE FUNCTION token_events_xid() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off AS $$
DECLARE
    prior xid8;
BEGIN
    NEW.xid := pg_current_xact_id();
    IF NEW.event_id IS NULL THEN
        NEW.event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    END IF;
    NEW.seq := nextval('token_events_seq_seq');
    IF TG_TABLE_NAME = 'token_events' AND TG_TABLE_SCHEMA = current_schema() THEN
        SELECT e.xid INTO prior FROM token_events e
        WHERE e.tenant_id = NEW.tenant_id AND e.token_id = NEW.token_id
        ORDER BY e.seq DESC
        LIMIT 1;
    ELSE
        EXECUTE format('SELECT e.xid FROM %I.%I e WHERE e.tenant_id = $1 AND e.token_id = $2 ORDER BY e.seq DESC LIMIT 1',
                       TG_TABLE_SCHEMA, TG_TABLE_NAME)
            INTO prior USING NEW.tenant_id, NEW.token_id;
    END IF;
    IF prior > NEW.xid AND prior < pg_snapshot_xmax(pg_current_snapshot()) THEN
        NEW.xid := prior;
    END IF;
    RETURN NEW;
END
$$;
