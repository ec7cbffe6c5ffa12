package apikey

const createSQL = `
INSERT INTO api_keys (tenant_id, id, key_hash, role)
VALUES ($1, $2, $3, $4)
RETURNING created_at`

// resolveSQL finds a live key by hash alone: keys are presented without their
// tenant. The hash of 256 random bits identifies one key.
const resolveSQL = `
SELECT tenant_id, id, role, created_at, key_hash
FROM api_keys
WHERE key_hash = $1 AND revoked_at IS NULL
LIMIT 1`

const revokeSQL = `
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND id = $2
RETURNING key_hash`
