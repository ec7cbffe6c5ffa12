-- tokend schema. Every unique constraint leads with tenant_id so the schema
-- can be distributed by tenant.

CREATE TABLE api_keys (
    tenant_id  text        NOT NULL,
    id         text        NOT NULL,
    key_hash   bytea       NOT NULL,
    role       text        NOT NULL CHECK (role IN ('client', 'operator')),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (tenant_id, id)
);
-- Keys are presented without a tenant, so resolution is by hash alone; the key
-- is 256 random bits, so the hash is as unique as a constraint would make it.
CREATE INDEX api_keys_key_hash ON api_keys (key_hash);

CREATE TABLE operations (
    tenant_id         text        NOT NULL,
    name              text        NOT NULL,
    mode              text        NOT NULL CHECK (mode IN ('atomic', 'lease')),
    on_lease_expiry   text        NOT NULL DEFAULT 'unknown' CHECK (on_lease_expiry IN ('unknown', 'takeover')),
    lease_seconds     integer     NOT NULL DEFAULT 30 CHECK (lease_seconds > 0),
    max_ttl_seconds   integer     NOT NULL DEFAULT 3600 CHECK (max_ttl_seconds > 0),
    retention_seconds integer     NOT NULL DEFAULT 86400 CHECK (retention_seconds >= 0),
    ignored_fields    text[]      NOT NULL DEFAULT '{}',
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE tokens (
    tenant_id         text        NOT NULL,
    id                text        NOT NULL,
    operation         text        NOT NULL,
    intent_id         text        NOT NULL,
    subject           text        NOT NULL,
    -- The secret itself is never stored: only its SHA-256 for lookup and the
    -- nonce and server key id it is re-derived from on an idempotent re-issue.
    secret_hash       bytea       NOT NULL,
    secret_nonce      bytea       NOT NULL,
    secret_key_id     text        NOT NULL,
    fingerprint       bytea       NOT NULL,
    payload_digest    bytea,
    ttl_seconds       integer     NOT NULL CHECK (ttl_seconds > 0),
    retention_seconds integer     NOT NULL CHECK (retention_seconds >= 0),
    state             text        NOT NULL CHECK (state IN ('issued', 'pending', 'consumed', 'failed', 'unknown', 'revoked', 'expired')),
    generation        bigint      NOT NULL DEFAULT 0,
    operation_id      text,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    -- Until then the intent is remembered: a re-issue replays and a re-spend
    -- replays the stored outcome. Moved forward when the token finishes.
    retain_until      timestamptz NOT NULL,
    finished_at       timestamptz,
    result_status     integer,
    result_body       bytea,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, secret_hash),
    UNIQUE (tenant_id, operation, intent_id)
);
CREATE INDEX tokens_by_state ON tokens (tenant_id, state, id);
-- The sweeper's and the alerting gauges' paths.
CREATE INDEX tokens_unresolved ON tokens (created_at) WHERE state IN ('pending', 'unknown');
CREATE INDEX tokens_purgeable ON tokens (retain_until) WHERE state NOT IN ('pending', 'unknown');
CREATE INDEX tokens_expirable ON tokens (expires_at) WHERE state = 'issued';

CREATE TABLE token_events (
    tenant_id  text        NOT NULL,
    token_id   text        NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    kind       text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    generation bigint      NOT NULL,
    detail     jsonb,
    PRIMARY KEY (tenant_id, token_id, seq)
);

-- The built-in demo business behind ledger.credit.
CREATE TABLE ledger_accounts (
    tenant_id  text        NOT NULL,
    account    text        NOT NULL,
    balance    bigint      NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, account)
);

-- One entry per token: a second effect for the same token would violate the key.
CREATE TABLE ledger_entries (
    tenant_id  text        NOT NULL,
    token_id   text        NOT NULL,
    account    text        NOT NULL,
    amount     bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, token_id)
);
