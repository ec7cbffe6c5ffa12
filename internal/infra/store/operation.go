package store

// policyColumns are a declaration's columns, in the order scanPolicy reads them.
const policyColumns = `name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields, event_outcome, version`

// policyGetSQL reads tenant $1's declaration of operation $2.
const policyGetSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 AND name = $2`

// policyListSQL reads tenant $1's declarations, by name.
const policyListSQL = `SELECT ` + policyColumns + ` FROM operations WHERE tenant_id = $1 ORDER BY name`

// policyPutSQL declares or redeclares. The update time and the new version are
// computed in VALUES and taken from EXCLUDED: Citus refuses now() and
// nextval in ON CONFLICT DO UPDATE SET, and evaluates them in VALUES on the
// coordinator. A new declaration takes one number of the sequence as its
// column default did; a redeclaration one, as before.
const policyPutSQL = `
INSERT INTO operations (tenant_id, name, mode, on_lease_expiry, lease_seconds, max_ttl_seconds, retention_seconds, ignored_fields, event_outcome,
                        updated_at, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), nextval('operation_versions'))
ON CONFLICT (tenant_id, name) DO UPDATE SET
    mode = EXCLUDED.mode,
    on_lease_expiry = EXCLUDED.on_lease_expiry,
    lease_seconds = EXCLUDED.lease_seconds,
    max_ttl_seconds = EXCLUDED.max_ttl_seconds,
    retention_seconds = EXCLUDED.retention_seconds,
    ignored_fields = EXCLUDED.ignored_fields,
    event_outcome = EXCLUDED.event_outcome,
    updated_at = EXCLUDED.updated_at,
    version = EXCLUDED.version
RETURNING version`

// policyLockSQL takes the declaration's row lock, waiting for the issues that hold
// it shared (policyCurrentSQL locks it FOR KEY SHARE) to commit, so
// that the statement after it sees their tokens.
const policyLockSQL = `SELECT version FROM operations WHERE tenant_id = $1 AND name = $2 FOR UPDATE`

// policyDeleteSQL deletes a declaration unless a token still needs it: issued and
// not yet expired (by the database clock), pending or unknown. Run after
// policyLockSQL in the same transaction, so no issue can slip in between.
const policyDeleteSQL = `
DELETE FROM operations
WHERE tenant_id = $1 AND name = $2
  AND NOT EXISTS (
    SELECT 1 FROM tokens
    WHERE tenant_id = $1 AND operation = $2
      AND (state IN ('pending', 'unknown') OR (state = 'issued' AND expires_at > now()))
  )
RETURNING ` + policyColumns
