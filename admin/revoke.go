package admin

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// Revocation is an operator's revoke of one token: why, and who, for the
// audit trail.
type Revocation struct {
	Reason string
	Actor  string
}

// RevokeTx revokes tenant's token id inside tx, recording r's reason and
// actor in its audit trail, and returns the revoked token. Only an issued token can be
// revoked: any other state gives an error wrapping token.ErrInvalidState, an
// issued token past its expiry (by the database clock) included, as it is
// expired (inspect.StateExpr); a missing token, or another tenant's, gives
// token.ErrNotFound.
//
// A revoke racing a spend of the same token has exactly one winner: the
// spend holds the row lock, and the revoke's UPDATE, waiting for it,
// re-checks the state the spend left. The loser's error names the winner's
// state.
func RevokeTx(ctx context.Context, tx pgx.Tx, tenant, id string, r Revocation) (token.Record, error) {
	if err := token.CheckText("reason", r.Reason, "actor", r.Actor); err != nil {
		return token.Record{}, tokend.InvalidWith(ErrInvalidRequest, "", err)
	}
	return store.Revoke(ctx, tx, store.RevokeParams{Tenant: tenant, ID: id, Reason: r.Reason, Actor: r.Actor})
}

// Revoke is RevokeTx in a transaction of its own.
func Revoke(ctx context.Context, b db.Beginner, tenant, id string, r Revocation) (token.Record, error) {
	return inTx(ctx, b, func(tx pgx.Tx) (token.Record, error) {
		return RevokeTx(ctx, tx, tenant, id, r)
	})
}
