-- bench/issue.sql: the ISSUE limit, a pgbench script.
--
--   pgbench -M prepared -n -f bench/issue.sql -D tenant=pgb -c C -j 2 -T secs
--
-- tokend's issuance statement (intent/sql.go insertSQL) run autocommit: check
-- the operation's policy version (tokend caches policies in process), copy
-- the policy onto the token, claim a
-- new intent with INSERT ... ON CONFLICT DO NOTHING RETURNING and write its
-- issue event, one statement, one round trip. Every transaction uses a fresh
-- intent id, so every one inserts.
--
-- tokend makes its random values in Go (crypto/rand); here Postgres does, with
-- gen_random_uuid. Token ids lead with the millisecond clock in hex, as
-- token.NewID's do, so the primary key grows at its right edge the same way.
WITH pol AS (
    SELECT coalesce((SELECT version FROM operations WHERE tenant_id = :tenant AND name = 'ledger.credit' FOR KEY SHARE), 0) = 0 AS current
), ins AS (
    INSERT INTO tokens (tenant_id, id, operation, intent_id, subject,
                        secret_hash, secret_nonce, secret_key_id, fingerprint, payload_digest,
                        ttl_seconds, retention_seconds, state, expires_at, retain_until,
                        mode, on_lease_expiry, lease_seconds, ignored_fields)
    SELECT :tenant,
            'tok_' || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 11, '0')
                   || left(replace(gen_random_uuid()::text, '-', ''), 15),
            'ledger.credit', gen_random_uuid()::text, 'user-' || :client_id,
            sha256(uuid_send(gen_random_uuid())), uuid_send(gen_random_uuid()), 'kbench',
            sha256(uuid_send(gen_random_uuid())), sha256(uuid_send(gen_random_uuid())),
            3600, 86400, 'issued',
            now() + make_interval(secs => 3600),
            now() + make_interval(secs => 3600 + 86400),
            'atomic', 'unknown', 30, '{trace_id}'
    FROM pol WHERE pol.current
    ON CONFLICT (tenant_id, operation, intent_id) DO NOTHING
    RETURNING tenant_id, id, operation, subject, created_at, expires_at, retain_until
), ev AS (
    INSERT INTO token_events (tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation)
    SELECT tenant_id, id, operation, subject, 'bench', 'issued', NULL, 'issued', 0 FROM ins
)
SELECT pol.current, ins.created_at, ins.expires_at, ins.retain_until FROM pol LEFT JOIN ins ON true;
