package db_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/tokendtest"
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
	ctx := context.Background()
	kit, cleanup := tokendtest.ForExample(nil) // a database of the example's own
	defer cleanup()
	pool := kit.Pool
	if _, err := pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts VALUES ('alice', 70)`); err != nil {
		panic(err)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + 30 WHERE id = 'alice'`); err != nil {
			return err
		}
		inTx, err := balance(ctx, tx, "alice") // sees the transaction's own write
		if err != nil {
			return err
		}
		outside, err := balance(ctx, pool, "alice") // does not, yet
		fmt.Println(inTx, outside, err)
		return err
	})
	if err != nil {
		panic(err)
	}
	_, err = balance(ctx, pool, "bob")
	fmt.Println(errors.Is(err, errNoAccount))
	// Output:
	// 100 70 <nil>
	// true
}
