-- bench/lookup.sql: the LOOKUP limit, a pgbench script.
--
--   pgbench -M prepared -n -f bench/lookup.sql -D tenant=pgb -D pool=N \
--           -c C -j 2 -T secs
--
-- Read one token by (tenant_id, secret_hash), a unique index probe, choosing
-- uniformly among the N pre-loaded keys (bench/load_tokens.sql), some issued,
-- some already spent. tokend's GET /v1/tokens/{id} probes the primary key
-- (tenant_id, id) instead: another unique b-tree of the same depth, so the
-- same cost to Postgres.
\set n random(1, :pool)
SELECT id, operation, subject, state, generation, payload_digest,
       created_at, expires_at, finished_at, retain_until, result_status
FROM tokens
WHERE tenant_id = :tenant AND secret_hash = sha256(int8send(:n));
