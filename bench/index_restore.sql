-- bench/index_restore.sql: rebuild what bench/index_drop.sql dropped, exactly
-- as the catalog described it, then forget the saved definitions.
-- maintenance_work_mem is raised for this session only, so 10^7 keys sort in
-- memory; no server setting changes.
--
--   psql -v ON_ERROR_STOP=1 -f bench/index_restore.sql

\set ON_ERROR_STOP 1
SET maintenance_work_mem = '1GB';
SELECT create_sql FROM bench_saved_ddl ORDER BY ord \gexec
DROP TABLE bench_saved_ddl;
