package websession

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
)

// SignOuts records sessions ended before their expiry, in Postgres
// (console_signouts), so that a session signed out on one instance is
// refused on every other, its cookie copied or not.
type SignOuts struct{ pool *pgxpool.Pool }

// NewSignOuts returns the sign-outs kept in pool's database.
func NewSignOuts(pool *pgxpool.Pool) SignOuts { return SignOuts{pool: pool} }

// ErrNoPool is returned by a SignOuts made without a pool.
var ErrNoPool = errors.New("websession: SignOuts has no pool")

// End records that tenant's session id was signed out; it stays refused
// until expires, its own expiry, after which the cookie is refused anyway.
// The tenant's sign-outs that expired are deleted meanwhile, so the table
// holds at most the sign-outs of one session lifetime.
func (s SignOuts) End(ctx context.Context, tenant, id string, expires time.Time) error {
	if s.pool == nil {
		return ErrNoPool
	}
	return store.SignOut(ctx, s.pool, tenant, id, expires)
}

// EndTx is End inside the caller's transaction.
func (s SignOuts) EndTx(ctx context.Context, tx pgx.Tx, tenant, id string, expires time.Time) error {
	return store.SignOut(ctx, tx, tenant, id, expires)
}

// Ended reports whether tenant's session id was signed out.
func (s SignOuts) Ended(ctx context.Context, tenant, id string) (bool, error) {
	if s.pool == nil {
		return false, ErrNoPool
	}
	return store.SignedOut(ctx, s.pool, tenant, id)
}
