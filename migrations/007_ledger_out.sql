-- The demo ledger's tables leave tokend's schema: the ledger is an example
-- business with a migration set of its own (example/ledger/migrations),
-- applied after this one by tokend serve and tokend migrate. A program that
-- embeds these migrations no longer gets ledger tables.
--
-- Tables holding rows are left in place, for the ledger's set to adopt
-- (CREATE TABLE IF NOT EXISTS): nothing is lost on upgrade. So are tables
-- the ledger's set already owns.
DO $$
BEGIN
    IF to_regclass('tokend_ledger_schema_version') IS NULL
       AND NOT EXISTS (SELECT 1 FROM ledger_accounts)
       AND NOT EXISTS (SELECT 1 FROM ledger_entries) THEN
        DROP TABLE ledger_entries;
        DROP TABLE ledger_accounts;
    END IF;
END
$$;
