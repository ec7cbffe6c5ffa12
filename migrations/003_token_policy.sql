-- A token keeps the policy it was issued under: its operation's mode, lease
-- length, lease-expiry policy and ignored fields are copied onto the token
-- at issue (retention_seconds already was), and spends, lease grants,
-- takeovers, the sweeper and issue replays read the token's copy, never the
-- operation's current declaration. Redeclaring an operation governs only the
-- tokens issued after it; deleting one leaves its finished tokens readable.
--
-- The defaults fill the rows that exist now and rows written by hand (test
-- fixtures); tokend's own insert (intent/sql.go) always names all four.
ALTER TABLE tokens
    ADD COLUMN mode            text    NOT NULL DEFAULT 'atomic'  CHECK (mode IN ('atomic', 'lease')),
    ADD COLUMN on_lease_expiry text    NOT NULL DEFAULT 'unknown' CHECK (on_lease_expiry IN ('unknown', 'takeover')),
    ADD COLUMN lease_seconds   integer NOT NULL DEFAULT 30        CHECK (lease_seconds > 0),
    ADD COLUMN ignored_fields  text[]  NOT NULL DEFAULT '{}';

-- Tokens issued before this migration take their operation's policy as it
-- stands now, which is what they were being spent under.
UPDATE tokens t
SET mode = o.mode, on_lease_expiry = o.on_lease_expiry,
    lease_seconds = o.lease_seconds, ignored_fields = o.ignored_fields
FROM operations o
WHERE o.tenant_id = t.tenant_id AND o.name = t.operation;

-- The built-ins not overridden: atomic, unknown, 30 s, trace_id ignored
-- (operation.Builtin).
UPDATE tokens t
SET ignored_fields = '{trace_id}'
WHERE t.operation IN ('ledger.credit', 'ledger.debit')
  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant_id = t.tenant_id AND o.name = t.operation);

