-- API keys are presented without their tenant, so resolving one by its hash
-- alone (api_keys is distributed by tenant_id) asked every Citus worker:
-- with any worker down, every tenant's requests failed. api_key_routes
-- maps a key's hash to its tenant. On Citus it is a reference table, read
-- on the coordinator, and the key's row is then read on its tenant's
-- worker only. The column is key_tenant, not tenant_id: this is not one
-- tenant's table (tenant tables are distributed by tenant_id), it is the
-- one index from every key to its tenant. On plain Postgres it is one more
-- indexed read per key resolution.
CREATE TABLE api_key_routes (
    key_hash   bytea PRIMARY KEY,
    key_tenant text  NOT NULL
);

INSERT INTO api_key_routes (key_hash, key_tenant)
SELECT key_hash, tenant_id FROM api_keys
ON CONFLICT (key_hash) DO NOTHING;

DO $citus$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_reference_table('api_key_routes');
    END IF;
END
$citus$;
