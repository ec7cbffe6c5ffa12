package websession

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SignOuts records sessions ended before their expiry, in Postgres
// (console_signouts), so that a session signed out on one instance is
// refused on every other, its cookie copied or not.
type SignOuts struct{ pool *pgxpool.Pool }

// NewSignOuts returns the sign-outs kept in pool's database.
func NewSignOuts(pool *pgxpool.Pool) SignOuts { return SignOuts{pool: pool} }

// ErrNoPool is returned by a SignOuts made without a pool.
var ErrNoPool = errors.New("websession: SignOuts has no pool")

// execer is what the statements need: a pool, a connection or a tx.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// End records that tenant's session id was signed out; it stays refused
// until expires, its own expiry, after which the cookie is refused anyway.
// The tenant's sign-outs that expired are deleted meanwhile, so the table
// holds at most the sign-outs of one session lifetime.
func (s SignOuts) End(ctx context.Context, tenant, id string, expires time.Time) error {
	if s.pool == nil {
		return ErrNoPool
	}
	return end(ctx, s.pool, tenant, id, expires)
}

// EndTx is End inside the caller's transaction.
func (s SignOuts) EndTx(ctx context.Context, tx pgx.Tx, tenant, id string, expires time.Time) error {
	return end(ctx, tx, tenant, id, expires)
}

func end(ctx context.Context, db execer, tenant, id string, expires time.Time) error {
	if _, err := db.Exec(ctx, sqlEndSession, tenant, id, expires); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlForgetExpired, tenant)
	return err
}

// Ended reports whether tenant's session id was signed out.
func (s SignOuts) Ended(ctx context.Context, tenant, id string) (bool, error) {
	if s.pool == nil {
		return false, ErrNoPool
	}
	var ended bool
	err := s.pool.QueryRow(ctx, sqlSessionEnded, tenant, id).Scan(&ended)
	return ended, err
}

const (
	sqlEndSession = `INSERT INTO console_signouts (tenant_id, session_id, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, session_id) DO NOTHING`
	sqlForgetExpired = `DELETE FROM console_signouts WHERE tenant_id = $1 AND expires_at < now()`
	sqlSessionEnded  = `SELECT EXISTS (SELECT 1 FROM console_signouts WHERE tenant_id = $1 AND session_id = $2)`
)
