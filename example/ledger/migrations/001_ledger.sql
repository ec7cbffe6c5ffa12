-- The ledger's tables. Before the ledger had a migration set of its own,
-- tokend's 001_init created them; IF NOT EXISTS adopts those, with their
-- rows, where tokend's 007 left them in place because they held data.

CREATE TABLE IF NOT EXISTS ledger_accounts (
    tenant_id  text        NOT NULL,
    account    text        NOT NULL,
    balance    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, account)
);

-- One entry per token: a second effect for the same token would violate the key.
CREATE TABLE IF NOT EXISTS ledger_entries (
    tenant_id  text        NOT NULL,
    token_id   text        NOT NULL,
    account    text        NOT NULL,
    amount     bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, token_id)
);
