package db_test

import (
	"context"
	"errors"

	"github.com/tokend/tokend/db"
)

var errNoAccount = errors.New("no such account")

// balance runs on whatever the caller holds: a pool, a connection, or the
// transaction its own writes are in.
func balance(ctx context.Context, q db.DBTX, account string) (int64, error) {
	var b int64
	err := q.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, account).Scan(&b)
	return b, db.RowError(err, errNoAccount, "balance")
}

// A function that reads or writes takes a db.DBTX, so it joins the
// caller's transaction when given one.
func Example() {
	_ = balance
}
