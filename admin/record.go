package admin

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/token"
)

// ErrInvalidRequest is returned (wrapped) for a request that is malformed
// before it reaches any token: an unknown reconciliation outcome, a status
// that contradicts it. Nothing was written.
var ErrInvalidRequest = errors.New("admin: invalid request")

// inTx runs f in a transaction of its own, committed when f succeeds.
func inTx(ctx context.Context, b db.Beginner, f func(tx pgx.Tx) (token.Record, error)) (token.Record, error) {
	var rec token.Record
	err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		var err error
		rec, err = f(tx)
		return err
	})
	return rec, err
}
