-- Webhooks for many tenants (issue 34).
--
-- A disabled endpoint's deliveries wait in a state of their own, parked, so
-- they are neither lag nor retried, and resume when it is enabled again.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_state_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'failed', 'parked'));
UPDATE webhook_deliveries d SET state = 'parked'
FROM webhook_endpoints w
WHERE w.tenant_id = d.tenant_id AND w.id = d.endpoint_id AND NOT w.enabled AND d.state = 'pending';

-- A rotated secret keeps signing beside the new one until prev_secret_until;
-- like the current one it is derived, never stored.
ALTER TABLE webhook_endpoints
    ADD COLUMN prev_secret_nonce  bytea,
    ADD COLUMN prev_secret_key_id text,
    ADD COLUMN prev_secret_until  timestamptz;

-- The claim looks, per endpoint, at its due deliveries and at those leased
-- now (what the endpoint and its tenant have in flight, on every instance).
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (tenant_id, endpoint_id, next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (tenant_id, endpoint_id)
    WHERE state = 'pending' AND leased_until IS NOT NULL;
DROP INDEX webhook_deliveries_due;

-- The event retention sweep keeps the events a parked delivery owes too.
CREATE INDEX webhook_deliveries_owing ON webhook_deliveries (tenant_id, pos) WHERE state IN ('pending', 'parked');
DROP INDEX webhook_deliveries_owed;
