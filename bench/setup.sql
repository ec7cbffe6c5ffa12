-- bench/setup.sql: objects the reference (pgbench) workloads need next to
-- tokend's own schema. Run by tokend-load once per run, after migrating,
-- on the dedicated bench database (tokend_bench, recreated every run).
--
-- bench_spend_seq hands out the keys of pre-loaded issued tokens to the
-- SPEND script: every transaction takes the next key, so each spends a
-- distinct token, whatever the number of clients, and consecutive runs go on
-- where the last one stopped. nextval is not transactional and costs
-- nothing next to a commit; its WAL record is written once per 32 values.
CREATE SEQUENCE IF NOT EXISTS bench_spend_seq;
