-- Citus (the same block as tokend's 013_citus): where the citus extension
-- is present, distribute every table of this schema that is still local. Tables with a tenant_id column are
-- distributed by it, co-located with tokens (so a statement on one tenant
-- runs on one worker, joins and foreign keys included), parents before the
-- tables whose foreign keys point at them; tables without one (the schema
-- version table) become reference tables. On plain Postgres this does
-- nothing. Migrations 001-011 build local tables first; this one
-- distributes them in one step. Every later migration applies to a
-- distributed schema (migrations.Set.Apply sends it statement by statement
-- there). Here: the ledger's tables, co-located with tokend's tokens.
--
-- citus.enable_unsafe_triggers: token_events carries a trigger (the feed's
-- xid), which Citus runs on the shards only with it on.
DO $citus$
DECLARE
    t regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RETURN;
    END IF;
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    IF to_regclass('tokens') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'tokens'::regclass) THEN
        PERFORM create_distributed_table('tokens', 'tenant_id');
    END IF;
    LOOP
        -- A local tenant table none of whose foreign keys points at another
        -- local table.
        SELECT c.oid::regclass INTO t
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped)
          AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)
          AND NOT EXISTS (
              SELECT 1 FROM pg_constraint f
              WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid <> c.oid
                AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = f.confrelid))
        ORDER BY c.relname
        LIMIT 1;
        EXIT WHEN t IS NULL;
        PERFORM create_distributed_table(t, 'tenant_id', colocate_with => 'tokens');
    END LOOP;
    FOR t IN
        SELECT c.oid::regclass
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p WHERE p.logicalrelid = c.oid)
        ORDER BY c.relname
    LOOP
        PERFORM create_reference_table(t);
    END LOOP;
END
$citus$;
