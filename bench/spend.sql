-- bench/spend.sql: the SPEND limit, a pgbench script.
--
--   pgbench -M prepared -n -f bench/spend.sql -D tenant=pgb -D accounts=1000 \
--           -c C -j 2 -T secs
--
-- What Postgres itself can do for one atomic spend of ledger.credit on
-- tokend's own schema: claim one pre-loaded issued token (bench/load_tokens.sql)
-- and store its outcome, credit the ledger, write the audit event, commit.
-- These are the rows and indexes tokend's spend writes, in one transaction
-- with five round trips, as pgbench sends each statement on its own; tokend
-- (consume.Spender with example/ledger) does the same work in three: BEGIN
-- with set_config and the SELECT ... FOR UPDATE, the ledger statement, and
-- the UPDATE + event statement with COMMIT (store.Pipelined).
--
-- Every transaction takes the next key from bench_spend_seq (bench/setup.sql),
-- so no two spend the same token. The subquery is an InitPlan, evaluated once,
-- so the lookup stays an index scan on (tenant_id, secret_hash). When the pool
-- runs dry the UPDATE returns no row, \gset fails and the client aborts: a run
-- never quietly measures spends that found nothing.
--
-- The account is the key modulo :accounts, as tokend-load picks it, so the
-- ledger rows are shared the same way by both sides.
--
-- The event is inserted as tokend's record statements insert it: seq given
-- as 0 with OVERRIDING SYSTEM VALUE, so the identity's default is not called
-- and the trigger token_events_xid (migration 014) numbers the row, once;
-- xid given as the token's event_xid, which the UPDATE's trigger
-- tokens_event_xid set (migration 022).
BEGIN;
UPDATE tokens
SET state = 'consumed', result_status = 200, finished_at = now(),
    result_body = convert_to('{"token_id":"' || id || '","state":"consumed","result":{"account":"acct-'
                             || substr(intent_id, 8)::bigint % :accounts || '","balance":1}}', 'UTF8'),
    retain_until = greatest(retain_until, now() + make_interval(secs => retention_seconds))
WHERE tenant_id = :tenant
  AND secret_hash = (SELECT sha256(int8send(nextval('bench_spend_seq'))))
  AND state = 'issued'
RETURNING id AS token_id, generation, subject, 'acct-' || substr(intent_id, 8)::bigint % :accounts AS account, event_xid \gset
WITH a AS (
    INSERT INTO ledger_accounts AS la (tenant_id, account, balance)
    VALUES (:tenant, :account, 1)
    ON CONFLICT (tenant_id, account) DO UPDATE
    SET balance = la.balance + EXCLUDED.balance, updated_at = now()
    WHERE la.balance + EXCLUDED.balance <= 1000000000000000
    RETURNING balance
)
INSERT INTO ledger_entries (tenant_id, token_id, account, amount)
SELECT :tenant, :token_id, :account, 1 FROM a;
INSERT INTO token_events (seq, xid, tenant_id, token_id, operation, subject, actor, kind, from_state, to_state, generation, outcome_status)
OVERRIDING SYSTEM VALUE
VALUES (0, :event_xid, :tenant, :token_id, 'ledger.credit', :subject, 'bench', 'spend', 'issued', 'consumed', :generation, 200);
END;
