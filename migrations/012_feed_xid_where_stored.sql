-- An event's xid is the id of the writing transaction on the node that stores
-- the event, and each tenant's feed has an epoch.
--
-- xid: the column default pg_current_xact_id() is evaluated where the INSERT
-- is planned. On one Postgres that is where the row is stored; on Citus it is
-- the coordinator, whose ids number other transactions than the worker's
-- snapshot that positions the events (event/sql.go), so the feed skipped or
-- stalled. A BEFORE INSERT trigger runs where the row is stored, on the
-- shard: on one Postgres it gives the same id as the default did. Citus
-- refuses triggers on distributed tables unless citus.enable_unsafe_triggers
-- is on (this trigger reads nothing of other shards, which is what the
-- setting warns about); a table distributed after this migration needs the
-- setting on when create_distributed_table is called, and the trigger is
-- then created on every shard.
CREATE FUNCTION token_events_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.xid := pg_current_xact_id();
    RETURN NEW;
END
$$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        SET LOCAL citus.enable_unsafe_triggers = on;
    END IF;
    CREATE TRIGGER token_events_xid BEFORE INSERT ON token_events
        FOR EACH ROW EXECUTE FUNCTION token_events_xid();
END
$$;

-- Epochs: a feed restored into another cluster (or whose shards moved to
-- another worker) is rebased, and may then hand out again positions it had
-- handed out before the restore. A rebase starts a new epoch at the head's
-- position; GET /v1/events answers the epoch, takes it back with the cursor,
-- and refuses a cursor of an earlier epoch past the position where the feed
-- left that epoch (event.Epoch). prior_epochs and prior_bases are the epochs
-- the feed left, oldest first, with the positions they started at.
ALTER TABLE event_feed_heads ADD COLUMN epoch text;
ALTER TABLE event_feed_heads ADD COLUMN epoch_base bigint;
ALTER TABLE event_feed_heads ADD COLUMN prior_epochs text[];
ALTER TABLE event_feed_heads ADD COLUMN prior_bases bigint[];

-- Feeds that exist get their first epoch from their tenant: an immutable
-- function, which Citus lets an UPDATE of every shard evaluate.
UPDATE event_feed_heads SET epoch = substr(md5('tokend feed ' || tenant_id), 1, 16), epoch_base = 0
WHERE epoch IS NULL;
