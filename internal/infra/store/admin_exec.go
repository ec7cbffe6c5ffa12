package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/token"
)

// RevokeParams is an operator's revoke of one issued token.
type RevokeParams struct {
	Tenant, ID, Reason, Actor string
}

// Revoke moves p's token from issued to revoked in tx, recording p.Reason
// in its event (TransitionTx tells why it missed).
func Revoke(ctx context.Context, tx pgx.Tx, p RevokeParams) (token.Record, error) {
	return TransitionTx(ctx, tx, p.Tenant, p.ID, token.Issued, token.Revoke, revokeSQL,
		Moved{Tenant: p.Tenant, ID: p.ID, Actor: p.Actor, Extra: []any{p.Reason}}, p.Tenant, p.ID)
}

// ReconcileParams is an operator's verdict on one unknown token: Action is
// one of the token.Reconcile* actions. For succeeded and failed, To is the
// state it leads to and Status and Body the outcome later spends replay.
type ReconcileParams struct {
	Tenant, ID, Actor string
	Action            token.Action
	To                token.State
	Status            int
	Body              []byte
}

// Reconcile records p's verdict in tx: not executed returns the token to
// issued with its generation bumped; succeeded and failed store the outcome.
func Reconcile(ctx context.Context, tx pgx.Tx, p ReconcileParams) (token.Record, error) {
	if p.Action == token.ReconcileNotExecuted {
		return TransitionTx(ctx, tx, p.Tenant, p.ID, token.Unknown, p.Action, reconcileNotExecutedSQL,
			Moved{Tenant: p.Tenant, ID: p.ID, Actor: p.Actor}, p.Tenant, p.ID)
	}
	return TransitionTx(ctx, tx, p.Tenant, p.ID, token.Unknown, p.Action, reconcileOutcomeSQL,
		Moved{Tenant: p.Tenant, ID: p.ID, Actor: p.Actor, Kind: string(p.Action)}, p.Tenant, p.ID, p.To, p.Status, p.Body)
}
