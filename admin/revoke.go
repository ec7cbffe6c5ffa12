package admin

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// RevokeTx revokes tenant's token id inside tx, recording reason and actor in
// its audit trail, and returns the revoked token. Only an issued token can be
// revoked: any other state gives an error wrapping token.ErrInvalidState, an
// issued token past its expiry (by the database clock) included, as it is
// expired (inspect.StateExpr); a missing token, or another tenant's, gives
// token.ErrNotFound.
//
// A revoke racing a spend of the same token has exactly one winner: the
// spend holds the row lock, and the revoke's UPDATE, waiting for it,
// re-checks the state the spend left. The loser's error names the winner's
// state.
func RevokeTx(ctx context.Context, tx pgx.Tx, tenant, id, reason, actor string) (token.Record, error) {
	if err := token.CheckText("reason", reason, "actor", actor); err != nil {
		return token.Record{}, tokend.InvalidWith(ErrInvalidRequest, "", err)
	}
	return transition(ctx, tx, tenant, id, token.Issued, token.Revoke, store.RevokeSQL,
		store.Moved{Tenant: tenant, ID: id, Actor: actor, Extra: []any{reason}}, tenant, id)
}

// Revoke is RevokeTx in a transaction of its own.
func Revoke(ctx context.Context, b db.Beginner, tenant, id, reason, actor string) (token.Record, error) {
	return inTx(ctx, b, func(tx pgx.Tx) (token.Record, error) {
		return RevokeTx(ctx, tx, tenant, id, reason, actor)
	})
}
