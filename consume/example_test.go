package consume_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/token"
)

// A Go program spends a token inside its own transaction, next to its own
// business row: both commit, or neither does.
func ExampleSpender_SpendTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/shop")
	if err != nil {
		log.Fatal(err)
	}
	handlers := consume.NewRegistry()
	handlers.Register("checkout.submit", consume.HandlerFunc(
		func(ctx context.Context, tx pgx.Tx, c consume.Call) (consume.Outcome, error) {
			var orderID int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (token_id, body) VALUES ($1, $2) RETURNING id`, c.TokenID, c.Payload).Scan(&orderID)
			return consume.Outcome{Status: 200, Result: map[string]int64{"order_id": orderID}}, err
		}))
	// The keyring the Issuer derives secrets under: a token derived under a
	// key it does not hold (a retired key) is refused.
	keys, err := token.NewKeyring(os.Getenv("TOKEND_SECRET_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	secret, err := token.ParseSecret("tks_…the value from the hidden form field…")
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		resp, err := spender.SpendTx(ctx, tx, consume.Request{
			Tenant: "shop", Secret: secret, Operation: "checkout.submit",
			Subject: "user-42", Payload: []byte(`{"sku":"book-1","qty":1}`),
		})
		if err != nil {
			return err // rolled back: the token stays spendable
		}
		if _, err := tx.Exec(ctx, `UPDATE carts SET checked_out = true WHERE user_id = $1`, "user-42"); err != nil {
			return err // rolled back together with the spend
		}
		fmt.Printf("%d %s\n", resp.Status, resp.Body)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
