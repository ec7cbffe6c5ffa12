package store

import (
	"context"
	"time"

	"github.com/tokend/tokend/db"
)

// Statements of console sign-outs (internal/serve/websession).
const (
	// SignOutSQL records that tenant $1's session $2, valid until $3, was
	// signed out.
	SignOutSQL = `INSERT INTO console_signouts (tenant_id, session_id, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, session_id) DO NOTHING`
	// ForgetSignOutsSQL deletes tenant $1's sign-outs whose sessions expired.
	ForgetSignOutsSQL = `DELETE FROM console_signouts WHERE tenant_id = $1 AND expires_at < now()`
	// SignedOutSQL is whether tenant $1's session $2 was signed out.
	SignedOutSQL = `SELECT EXISTS (SELECT 1 FROM console_signouts WHERE tenant_id = $1 AND session_id = $2)`
)

// SignOut records that tenant's session id, valid until expires, was
// signed out (SignOutSQL), and deletes the tenant's sign-outs that expired
// (ForgetSignOutsSQL).
func SignOut(ctx context.Context, q db.DBTX, tenant, id string, expires time.Time) error {
	if _, err := q.Exec(ctx, SignOutSQL, tenant, id, expires); err != nil {
		return err
	}
	_, err := q.Exec(ctx, ForgetSignOutsSQL, tenant)
	return err
}

// SignedOut reports whether tenant's session id was signed out
// (SignedOutSQL).
func SignedOut(ctx context.Context, q db.DBTX, tenant, id string) (bool, error) {
	var ended bool
	err := q.QueryRow(ctx, SignedOutSQL, tenant, id).Scan(&ended)
	return ended, err
}
