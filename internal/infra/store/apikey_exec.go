package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

// APIKeyRow is an API key as api_keys holds it: never its secret, only the
// secret's hash.
type APIKeyRow struct {
	Tenant, ID string
	Role       string
	Hash       []byte
	CreatedAt  time.Time
}

// CreateAPIKey stores k (apiKeyCreateSQL) and returns its creation time.
func CreateAPIKey(ctx context.Context, q db.DBTX, k APIKeyRow) (time.Time, error) {
	var at time.Time
	if err := q.QueryRow(ctx, apiKeyCreateSQL, k.Tenant, k.ID, k.Hash, k.Role).Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("apikey: create: %w", err)
	}
	return at, nil
}

// ResolveAPIKey finds the live key whose secret hashes to hash; ok is
// false when there is none. Its tenant comes from its route
// (apiKeyRouteSQL), then the key from that tenant's rows
// (apiKeyResolveSQL): on Citus, a worker that is down fails only its own
// tenants' keys. A key without a route is looked for by its hash alone
// (apiKeyResolveUnroutedSQL).
func ResolveAPIKey(ctx context.Context, q db.DBTX, hash []byte) (k APIKeyRow, ok bool, err error) {
	var tenant string
	err = q.QueryRow(ctx, apiKeyRouteSQL, hash).Scan(&tenant)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = q.QueryRow(ctx, apiKeyResolveUnroutedSQL, hash).Scan(&k.Tenant, &k.ID, &k.Role, &k.CreatedAt, &k.Hash)
	case err != nil:
		return APIKeyRow{}, false, fmt.Errorf("apikey: resolve: route: %w", err)
	default:
		err = q.QueryRow(ctx, apiKeyResolveSQL, tenant, hash).Scan(&k.Tenant, &k.ID, &k.Role, &k.CreatedAt, &k.Hash)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return APIKeyRow{}, false, nil
	case err != nil:
		return APIKeyRow{}, false, fmt.Errorf("apikey: resolve: %w", err)
	}
	return k, true, nil
}

// RevokeAPIKey revokes tenant's key id and notifies APIKeyRevokedChannel
// (apiKeyRevokeSQL); it returns the key's hash, or ok false when tenant
// has no such key.
func RevokeAPIKey(ctx context.Context, q db.DBTX, tenant, id string) (hash []byte, ok bool, err error) {
	err = q.QueryRow(ctx, apiKeyRevokeSQL, tenant, id).Scan(&hash, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("apikey: revoke: %w", err)
	}
	return hash, true, nil
}

// APIKeyLive reports whether tenant has a key id that is not revoked
// (apiKeyLiveSQL).
func APIKeyLive(ctx context.Context, q db.DBTX, tenant, id string) (bool, error) {
	var live bool
	err := q.QueryRow(ctx, apiKeyLiveSQL, tenant, id).Scan(&live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("apikey: live: %w", err)
	}
	return live, nil
}

// NotifyAPIKeys notifies APIKeyRevokedChannel with payload
// (apiKeyNotifySQL).
func NotifyAPIKeys(ctx context.Context, q db.DBTX, payload string) error {
	_, err := q.Exec(ctx, apiKeyNotifySQL, payload)
	return err
}

// ListenAPIKeys makes conn listen on APIKeyRevokedChannel (apiKeyListenSQL).
func ListenAPIKeys(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, apiKeyListenSQL)
	return err
}
