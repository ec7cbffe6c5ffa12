-- webhook_requests remembers the first answer of each webhook create and
-- rotate-secret sent with an Idempotency-Key, so that a retry or a double
-- click gets that answer again instead of a second endpoint or a second
-- rotation. The secret itself is never stored: the answer is kept without
-- it, and the nonce and server key it was derived from derive it again.
-- A new table: nothing else reads it, so the previous release is unaffected.
CREATE TABLE webhook_requests (
    tenant_id       text        NOT NULL,
    idempotency_key text        NOT NULL,
    request_digest  bytea       NOT NULL,
    status          integer     NOT NULL DEFAULT 0,
    answer          text        NOT NULL DEFAULT '',
    secret_nonce    bytea       NOT NULL,
    secret_key_id   text        NOT NULL,
    endpoint_id     text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idempotency_key)
);

DO $citus$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        PERFORM create_distributed_table('webhook_requests', 'tenant_id', colocate_with => 'tokens');
    END IF;
END
$citus$;
