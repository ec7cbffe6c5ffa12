---- tern: disable-tx ----
-- Each point lookup on tokens gets one index that can serve it (issue 43).
--
-- A prepared statement settles on a generic plan at its sixth execution,
-- which Postgres keeps until the table is next analyzed. Before tokens was
-- ever analyzed, "tenant_id = $1" reads to the planner as 0.5% of a table
-- it assumes small, so every index leading with tenant_id costs exactly as
-- much as the one that finds the row, and the tie went to the newest:
-- tokens_by_state (tenant_id, state, id). The issue's event insert, every
-- transition, the read by id and the spend's claim by secret hash then
-- walked all of the tenant's tokens, more with every token issued (17 to
-- 281 buffers per issue by 34,000 tokens), with no end until an ANALYZE.
-- Statistics do not settle it: an empty or small tenant, an emptied table
-- or a table just analyzed while small ties the same way.
--
-- So only the primary key leads with tenant_id. The lookup by id has no
-- other index it could use; the lookups by secret hash and by intent have
-- their own unique index and the primary key's tenant range, and when those
-- tie (a table never analyzed) the newer index, theirs, wins.
-- tokens_by_state keeps serving the lists by state, which name the state:
-- (state, tenant_id, id) orders a tenant's tokens of one state by id as
-- (tenant_id, state, id) did. The unique indexes hold the same uniqueness in
-- another column order; ON CONFLICT (tenant_id, operation, intent_id) infers
-- its arbiter by the set of columns, so the previous release's insert finds
-- it too. (operation, tenant_id, intent_id) still serves a tenant's tokens
-- of one operation (store.PolicyDeleteSQL).
--
-- Built CONCURRENTLY, outside a transaction, so issues and spends go on
-- while each index builds (a plain CREATE INDEX blocks every write to
-- tokens for the whole build); each statement commits alone, the new index
-- before the old one goes, so there is always an arbiter for the insert.
-- Every statement can run again after a failure halfway: a build that
-- failed leaves its index invalid, which the next run drops (a plain DROP
-- INDEX of an index nothing uses, a moment's lock) and builds anew; a
-- valid one is kept. Dropping the old constraints takes tokens' lock for a
-- moment only (lock_timeout bounds it).
DO $$
DECLARE
    i regclass;
BEGIN
    FOREACH i IN ARRAY ARRAY[to_regclass('tokens_by_state_tenant'), to_regclass('tokens_secret_hash'), to_regclass('tokens_intent')] LOOP
        IF i IS NOT NULL AND NOT (SELECT indisvalid FROM pg_index WHERE indexrelid = i) THEN
            EXECUTE format('DROP INDEX %s', i);
        END IF;
    END LOOP;
END
$$;

CREATE INDEX CONCURRENTLY IF NOT EXISTS tokens_by_state_tenant ON tokens (state, tenant_id, id);
DROP INDEX CONCURRENTLY IF EXISTS tokens_by_state;
ALTER INDEX tokens_by_state_tenant RENAME TO tokens_by_state;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS tokens_secret_hash ON tokens (secret_hash, tenant_id);
ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_tenant_id_secret_hash_key;

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS tokens_intent ON tokens (operation, tenant_id, intent_id);
ALTER TABLE tokens DROP CONSTRAINT IF EXISTS tokens_tenant_id_operation_intent_id_key;
