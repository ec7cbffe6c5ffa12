package admin

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
	"github.com/tokend/tokend/token"
)

// Outcome is what an operator established about a token whose outcome was
// unknown.
type Outcome string

// The outcomes of DESIGN.md's reconcile.
const (
	// Succeeded: the effect happened. The token is consumed and later spends
	// replay the stored result.
	Succeeded Outcome = "succeeded"
	// NotExecuted: the effect did not happen. The token is issued again
	// under a new generation and may be spent again.
	NotExecuted Outcome = "not_executed"
	// Failed: the effect failed for good. The token is failed and later
	// spends replay the stored error.
	Failed Outcome = "failed"
)

// Reconciliation is an operator's verdict on an unknown token.
type Reconciliation struct {
	Outcome Outcome
	// Status is the HTTP status stored and replayed: for Succeeded a 2xx,
	// default 200; for Failed a 4xx or 5xx, default 422; never one that
	// cannot carry a body (token.CheckOutcomeStatus). NotExecuted stores
	// nothing, so Status must be zero.
	Status int
	// Result is the stored result (Succeeded) or error (Failed), marshalled
	// to JSON once and replayed byte for byte. NotExecuted needs none, so
	// Result must be nil.
	Result any
	// Actor is who reconciles, for the audit trail.
	Actor string
}

// Validate reports what is wrong with r, wrapping ErrInvalidRequest.
func (r Reconciliation) Validate() error {
	if err := token.CheckText("actor", r.Actor); err != nil {
		return tokend.InvalidWith(ErrInvalidRequest, "", err)
	}
	switch r.Outcome {
	case Succeeded, Failed:
		if err := token.CheckOutcomeStatus(r.to(), r.status()); err != nil {
			return tokend.InvalidWith(ErrInvalidRequest, "", err)
		}
	case NotExecuted:
		if r.Status != 0 || r.Result != nil {
			return tokend.Invalid(ErrInvalidRequest, "outcome", "not_executed stores no status or result")
		}
	default:
		return tokend.Invalid(ErrInvalidRequest, "outcome", fmt.Sprintf("%q: want succeeded, not_executed or failed", r.Outcome))
	}
	return nil
}

// status is the status r stores: Status, or its outcome's default.
func (r Reconciliation) status() int {
	if r.Outcome == Succeeded {
		return cmp.Or(r.Status, http.StatusOK)
	}
	return cmp.Or(r.Status, http.StatusUnprocessableEntity)
}

// to is the state r moves an unknown token to.
func (r Reconciliation) to() token.State {
	to, _ := token.Next(token.Unknown, r.action()) // every outcome is a transition from unknown
	return to
}

// action is the token.Action that r performs.
func (r Reconciliation) action() token.Action {
	switch r.Outcome {
	case Succeeded:
		return token.ReconcileSucceeded
	case Failed:
		return token.ReconcileFailed
	}
	return token.ReconcileNotExecuted
}

// ReconcileTx records r for tenant's token id inside tx and returns the
// token as it now stands. Only an unknown token can be reconciled: any other
// state gives an error wrapping token.ErrInvalidState, and a missing token,
// or another tenant's, gives token.ErrNotFound.
//
// Succeeded and Failed store a status and body that every later spend of the
// token replays. NotExecuted returns the token to issued with its generation
// bumped, so the holder that lost track of it can no longer finish, and
// keeps its expiry: a token reconciled after it expired can only expire.
func ReconcileTx(ctx context.Context, tx pgx.Tx, tenant, id string, r Reconciliation) (token.Record, error) {
	if err := r.Validate(); err != nil {
		return token.Record{}, err
	}
	a := r.action()
	to, err := token.Next(token.Unknown, a)
	if err != nil {
		return token.Record{}, err
	}
	if r.Outcome == NotExecuted {
		return store.Reconcile(ctx, tx, store.ReconcileParams{Tenant: tenant, ID: id, Actor: r.Actor, Action: a})
	}
	status, body := r.status(), token.OutcomeBody{TokenID: id, State: to}
	if r.Outcome == Succeeded {
		body.Result = r.Result
	} else {
		body.Error = r.Result
	}
	b, err := body.Encode()
	if err != nil {
		return token.Record{}, tokend.Invalid(ErrInvalidRequest, "result", err.Error())
	}
	return store.Reconcile(ctx, tx, store.ReconcileParams{Tenant: tenant, ID: id, Actor: r.Actor, Action: a,
		To: to, Status: status, Body: b})
}

// Reconcile is ReconcileTx in a transaction of its own.
func Reconcile(ctx context.Context, b db.Beginner, tenant, id string, r Reconciliation) (token.Record, error) {
	return inTx(ctx, b, func(tx pgx.Tx) (token.Record, error) {
		return ReconcileTx(ctx, tx, tenant, id, r)
	})
}
