-- bench/index_drop.sql: before a large bulk load (10^6 rows and more), drop
-- the tokens table's indexes and unique constraints, remembering their
-- definitions from the catalog in bench_saved_ddl; bench/index_restore.sql
-- builds them again. Building an index by one sort is several times faster
-- than growing it row by row. The rebuilt indexes come out compact, where a
-- table grown by traffic has half-full pages from random inserts into the
-- secret_hash index: the growth figure is, if anything, a little kind.
--
--   psql -v ON_ERROR_STOP=1 -f bench/index_drop.sql

\set ON_ERROR_STOP 1
BEGIN;
CREATE TABLE bench_saved_ddl AS
SELECT 1 AS ord,
       format('ALTER TABLE tokens ADD CONSTRAINT %I %s', conname, pg_get_constraintdef(oid)) AS create_sql,
       format('ALTER TABLE tokens DROP CONSTRAINT %I', conname) AS drop_sql
FROM pg_constraint
WHERE conrelid = 'tokens'::regclass AND contype IN ('p', 'u')
UNION ALL
SELECT 2, pg_get_indexdef(i.indexrelid), format('DROP INDEX %s', i.indexrelid::regclass)
FROM pg_index i
WHERE i.indrelid = 'tokens'::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid);
SELECT drop_sql FROM bench_saved_ddl ORDER BY ord DESC \gexec
COMMIT;
