package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/store"
	"github.com/tokend/tokend/token"
)

// ErrInvalidRequest is returned (wrapped) for a request that is malformed
// before it reaches any token: an unknown reconciliation outcome, a status
// that contradicts it. Nothing was written.
var ErrInvalidRequest = errors.New("admin: invalid request")

// testHookAfterMiss, if set, runs between a transition's miss and its lock.
var testHookAfterMiss func()

// transition runs stmt, a conditional UPDATE … WHERE state = from that
// returns the moved token, and when it matches no row tells why: the token is
// missing (or another tenant's) or is in another state.
func transition(ctx context.Context, tx pgx.Tx, tenant, id string, from token.State, a token.Action, stmt string, args ...any) (token.Record, error) {
	if !token.ValidID(id) {
		return token.Record{}, token.ErrNotFound
	}
	rec, err := inspect.Scan(tx.QueryRow(ctx, stmt, args...))
	if !db.NoRow(err) {
		if err != nil {
			return token.Record{}, fmt.Errorf("admin: %s: %w", a, err)
		}
		return rec, nil
	}
	if testHookAfterMiss != nil {
		testHookAfterMiss()
	}
	var state token.State
	err = db.RowError(tx.QueryRow(ctx, store.LockStateSQL, tenant, id).Scan(&state), token.ErrNotFound, "admin: "+string(a))
	switch {
	case err != nil:
		return token.Record{}, err
	case state != from:
		return token.Record{}, tokend.Refuse(token.ErrInvalidState, "cannot %s a token that is %s", a, state)
	}
	// The token moved back into from between the UPDATE and the lock (an
	// operator reconciled it, a lease lapsed). Now that the row is locked
	// the UPDATE cannot miss.
	rec, err = inspect.Scan(tx.QueryRow(ctx, stmt, args...))
	if err != nil {
		return token.Record{}, fmt.Errorf("admin: %s: %w", a, err)
	}
	return rec, nil
}

// inTx runs f in a transaction of its own, committed when f succeeds.
func inTx(ctx context.Context, pool *pgxpool.Pool, f func(tx pgx.Tx) (token.Record, error)) (token.Record, error) {
	var rec token.Record
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		rec, err = f(tx)
		return err
	})
	return rec, err
}
