package store

// apiKeyCreateSQL stores a new key ($3 the hash of its secret) and its
// route, in one statement so that neither is kept without the other (on
// Citus it commits on every node: the route is a reference table).
const apiKeyCreateSQL = `
WITH route AS (
    INSERT INTO api_key_routes (key_hash, key_tenant) VALUES ($3, $1)
)
INSERT INTO api_keys (tenant_id, id, key_hash, role)
VALUES ($1, $2, $3, $4)
RETURNING created_at`

// apiKeyRouteSQL finds the tenant of the key whose hash is $1: keys are
// presented without their tenant. On Citus api_key_routes is a reference
// table read on the coordinator, so no worker is asked.
const apiKeyRouteSQL = `
SELECT key_tenant FROM api_key_routes WHERE key_hash = $1`

// apiKeyResolveSQL finds tenant $1's live key by its hash $2, on the
// tenant's worker alone on Citus.
const apiKeyResolveSQL = `
SELECT tenant_id, id, role, created_at, key_hash
FROM api_keys
WHERE tenant_id = $1 AND key_hash = $2 AND revoked_at IS NULL`

// apiKeyResolveUnroutedSQL finds a live key by its hash alone, asking every
// Citus worker: for a key without a route, made by an instance older than
// migration 016 while it ran. The hash of 256 random bits identifies one
// key.
const apiKeyResolveUnroutedSQL = `
SELECT tenant_id, id, role, created_at, key_hash
FROM api_keys
WHERE key_hash = $1 AND revoked_at IS NULL
LIMIT 1`

// APIKeyRevokedChannel is the Postgres notification channel Revoke notifies, with
// the hex SHA-256 of the revoked key as payload, and apikey.Watch listens
// on.
const APIKeyRevokedChannel = "tokend_api_key_revoked"

// apiKeyRevokeSQL revokes and tells every listener in one statement: Postgres
// delivers the notification when the transaction commits, and not at all if
// it rolls back. A repeated revoke notifies again, which is harmless and
// makes up for a notification a listener missed.
//
// On Citus: least(revoked_at, now()) keeps the first revocation time as
// coalesce did (least ignores NULL), and Citus evaluates its column-free
// now() on the coordinator, where it refuses a non-IMMUTABLE function in
// COALESCE. The join with this database's own pg_database row (one row,
// on plain Postgres too) is what keeps the notification on the
// coordinator, where the instances LISTEN: a catalog table is local, so
// Citus runs the UPDATE on the tenant's worker as a subplan and the outer
// SELECT, pg_notify with it, on the coordinator; without it Citus routes
// the whole statement to the worker, and the notification is sent there.
const apiKeyRevokeSQL = `
WITH revoked AS (
    UPDATE api_keys SET revoked_at = least(revoked_at, now())
    WHERE tenant_id = $1 AND id = $2
    RETURNING key_hash
)
SELECT key_hash, pg_notify('` + APIKeyRevokedChannel + `', encode(key_hash, 'hex'))
FROM revoked, pg_catalog.pg_database d
WHERE d.datname = current_database()`

// apiKeyListenSQL listens on APIKeyRevokedChannel.
const apiKeyListenSQL = `LISTEN ` + APIKeyRevokedChannel

// apiKeyNotifySQL notifies the channel with payload $1.
const apiKeyNotifySQL = `SELECT pg_notify('` + APIKeyRevokedChannel + `', $1)`

// apiKeyLiveSQL finds a key by its id, as a session that names it does.
const apiKeyLiveSQL = `
SELECT true FROM api_keys
WHERE tenant_id = $1 AND id = $2 AND revoked_at IS NULL`
