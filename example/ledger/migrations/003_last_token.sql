-- An account remembers the token of its last entry. A credit or debit is
-- then two statements on one tenant sent together (ledger.go): the
-- account's change, which sets last_token_id, and the entry, inserted from
-- the account's row when it carries the spend's token. On Citus each runs
-- on the worker holding the tenant and the spend commits there in one
-- phase; the single statement before (a CTE feeding the entry's INSERT)
-- went through the coordinator and committed with two.
ALTER TABLE ledger_accounts ADD COLUMN last_token_id text;
