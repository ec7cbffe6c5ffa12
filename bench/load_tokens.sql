-- bench/load_tokens.sql: bulk-load tokens into tokend's own tokens table with
-- one INSERT ... SELECT generate_series, the fastest way short of COPY.
--
--   psql -v ON_ERROR_STOP=1 -v tenant=pgb -v from=1 -v to=100000 \
--        -v issued_every=1 -f bench/load_tokens.sql
--
-- Variables
--   tenant        tenant_id of the rows.
--   from, to      key range; row n gets id tok_<n in hex, 26 wide> and
--                 secret_hash sha256(int8send(n)), the values the pgbench
--                 scripts compute from a key. Load each key once per tenant.
--   issued_every  1: every row is issued (the pool SPEND and LOOKUP use).
--                 k > 1: one row in k is issued and the others are consumed
--                 with a stored result, as in a table that has been in use
--                 for a while (the growth background).
--
-- tokend-load runs several of these side by side on disjoint ranges, and for
-- large loads wraps them in bench/index_drop.sql and bench/index_restore.sql.
-- Durability is untouched: the table stays logged, and fsync and
-- synchronous_commit are whatever the server says.

\set ON_ERROR_STOP 1
INSERT INTO tokens (tenant_id, id, operation, intent_id, subject,
                    secret_hash, secret_nonce, secret_key_id, fingerprint, payload_digest,
                    ttl_seconds, retention_seconds, state, expires_at, retain_until,
                    finished_at, result_status, result_body)
SELECT :'tenant', t.id, 'ledger.credit', 'intent-' || n, 'user-' || (n % 1000),
       sha256(int8send(n)), substr(sha256(int8send(-n)), 1, 16), 'kbench',
       sha256(int8send(n) || '\x01'::bytea), sha256(int8send(n % 1000)),
       3600, 86400, CASE WHEN t.issued THEN 'issued' ELSE 'consumed' END,
       now() + interval '1 hour', now() + interval '25 hours',
       CASE WHEN t.issued THEN NULL ELSE now() END,
       CASE WHEN t.issued THEN NULL ELSE 200 END,
       CASE WHEN t.issued THEN NULL
            ELSE convert_to(format('{"token_id":"%s","state":"consumed","result":{"account":"acct-%s","balance":%s}}',
                                   t.id, n % 1000, n), 'UTF8') END
FROM generate_series(:from::bigint, :to::bigint) AS g(n),
     LATERAL (SELECT 'tok_' || lpad(to_hex(n), 26, '0') AS id,
                     n % :issued_every = 0 AS issued) AS t;
