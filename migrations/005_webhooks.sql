-- Webhook endpoints, their deliveries and every attempt. Deliveries are made
-- from the event feed (migration 004): each endpoint keeps the last feed
-- position it fanned out, so every event is offered to it once, and a
-- delivery is leased by one dispatcher at a time (leased_until, taken with
-- SKIP LOCKED); a dispatcher that dies mid-delivery lets its lease run out,
-- and the delivery is sent again: at least once, never lost.
CREATE TABLE webhook_endpoints (
    tenant_id       text        NOT NULL,
    id              text        NOT NULL,
    url             text        NOT NULL,
    -- Event types delivered; empty: all.
    event_types     text[]      NOT NULL DEFAULT '{}',
    -- The signing secret is never stored: it is derived from the server key
    -- named here and this random nonce, like a token's secret.
    secret_nonce    bytea       NOT NULL,
    secret_key_id   text        NOT NULL,
    enabled         boolean     NOT NULL DEFAULT true,
    disabled_reason text,
    -- The last feed position fanned out to this endpoint.
    feed_pos        bigint      NOT NULL,
    -- Since when every attempt failed; NULL after a success.
    failing_since   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE webhook_deliveries (
    tenant_id       text        NOT NULL,
    endpoint_id     text        NOT NULL,
    pos             bigint      NOT NULL,
    event_id        text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_until    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    PRIMARY KEY (tenant_id, endpoint_id, pos),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
-- The event retention sweep keeps the events a pending delivery still needs.
CREATE INDEX webhook_deliveries_owed ON webhook_deliveries (tenant_id, pos) WHERE state = 'pending';

CREATE TABLE webhook_attempts (
    tenant_id   text        NOT NULL,
    endpoint_id text        NOT NULL,
    pos         bigint      NOT NULL,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    -- The answer's status, or NULL when there was none (error says why).
    status      integer,
    error       text,
    duration_ms integer     NOT NULL,
    PRIMARY KEY (tenant_id, endpoint_id, pos, attempt),
    FOREIGN KEY (tenant_id, endpoint_id, pos) REFERENCES webhook_deliveries ON DELETE CASCADE
);
