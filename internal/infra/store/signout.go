package store

import (
	"context"
	"time"

	"github.com/tokend/tokend/db"
)

// Statements of console sign-outs (internal/serve/websession).
const (
	// signOutSQL records that tenant $1's session $2, valid until $3, was
	// signed out.
	signOutSQL = `INSERT INTO console_signouts (tenant_id, session_id, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, session_id) DO NOTHING`
	// forgetSignOutsSQL deletes tenant $1's sign-outs whose sessions expired.
	forgetSignOutsSQL = `DELETE FROM console_signouts WHERE tenant_id = $1 AND expires_at < now()`
	// signedOutSQL is whether tenant $1's session $2 was signed out.
	signedOutSQL = `SELECT EXISTS (SELECT 1 FROM console_signouts WHERE tenant_id = $1 AND session_id = $2)`
)

// SignOut records that tenant's session id, valid until expires, was
// signed out (signOutSQL), and deletes the tenant's sign-outs that expired
// (forgetSignOutsSQL).
func SignOut(ctx context.Context, q db.DBTX, tenant, id string, expires time.Time) error {
	if _, err := q.Exec(ctx, signOutSQL, tenant, id, expires); err != nil {
		return err
	}
	_, err := q.Exec(ctx, forgetSignOutsSQL, tenant)
	return err
}

// SignedOut reports whether tenant's session id was signed out
// (signedOutSQL).
func SignedOut(ctx context.Context, q db.DBTX, tenant, id string) (bool, error) {
	var ended bool
	err := q.QueryRow(ctx, signedOutSQL, tenant, id).Scan(&ended)
	return ended, err
}
