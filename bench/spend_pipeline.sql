-- bench/spend_pipeline.sql: the SPEND limit in pgbench pipeline mode, the
-- strongest hand-written baseline (issue 33).
--
--   pgbench -M prepared -n -f bench/spend_pipeline.sql -D tenant=pgb -D accounts=1000 \
--           -c C -j 1 -t N
--
-- The same writes as bench/spend.sql (claim one pre-loaded issued token and
-- store its outcome, credit the ledger, write the audit event, commit), all
-- sent in one round trip: \startpipeline ... \endpipeline. pgbench cannot
-- \gset inside a pipeline, so the later statements do not read the UPDATE's
-- RETURNING: they compute the token's id, account and subject from the same
-- key, currval('bench_spend_seq') of this session, as bench/load_tokens.sql
-- derived them (id tok_<key in hex>, account acct-<key % accounts>, subject
-- user-<key % 1000>, generation 0 for a token never leased). Unlike
-- spend.sql, a run whose pool ran dry would not abort; scripts/bench-cpu
-- loads enough tokens for every transaction it sends.
\startpipeline
BEGIN;
UPDATE tokens
SET state = 'consumed', result_status = 200, finished_at = now(),
    result_body = convert_to('{"token_id":"' || id || '","state":"consumed","result":{"account":"acct-'
                             || substr(intent_id, 8)::bigint % :accounts || '","balance":1}}', 'UTF8'),
    retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
WHERE tenant_id = :tenant
  AND secret_hash = (SELECT sha256(int8send(nextval('bench_spend_seq'))))
  AND state = 'issued';
WITH a AS (
    INSERT INTO ledger_accounts AS la (tenant_id, account, balance)
    VALUES (:tenant, 'acct-' || currval('bench_spend_seq') % :accounts, 1)
    ON CONFLICT (tenant_id, account) DO UPDATE
    SET balance = la.balance + EXCLUDED.balance, updated_at = now()
    WHERE la.balance + EXCLUDED.balance <= 1000000000000000
    RETURNING balance
)
INSERT INTO ledger_entries (tenant_id, token_id, account, amount)
SELECT :tenant, 'tok_' || lpad(to_hex(currval('bench_spend_seq')), 26, '0'),
       'acct-' || currval('bench_spend_seq') % :accounts, 1 FROM a;
INSERT INTO token_events (seq, tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status)
OVERRIDING SYSTEM VALUE
VALUES (0, :tenant, 'tok_' || lpad(to_hex(currval('bench_spend_seq')), 26, '0'), 'ledger.credit',
        'user-' || currval('bench_spend_seq') % 1000, 'bench', 'spend', 'issued', 'consumed', 0, 200);
END;
\endpipeline
