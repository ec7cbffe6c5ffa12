package consume_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/tokendtest"
)

// A Go program spends a token inside its own transaction, next to its own
// business row: both commit, or neither does. The handler is typed
// (consume.RegisterFunc): it gets the payload read into an order, and the
// operation is declared by the same call.
func ExampleSpender_SpendTx() {
	ctx := context.Background()
	type order struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	}
	handlers := consume.NewRegistry()
	consume.RegisterFunc(handlers, operation.Policy{Name: "checkout.submit"},
		func(ctx context.Context, tx pgx.Tx, c consume.Call, o order) (consume.Outcome, error) {
			var orderID int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (token_id, sku, qty) VALUES ($1, $2, $3) RETURNING id`, c.TokenID, o.SKU, o.Qty).Scan(&orderID)
			return consume.Outcome{Status: 200, Result: map[string]int64{"order_id": orderID}}, err
		})
	// A database of the example's own with tokend's schema; a program has
	// its pool, its keyring and its own tables already.
	kit, cleanup := tokendtest.ForExample(handlers)
	defer cleanup()
	pool, spender := kit.Pool, kit.Spender
	if _, err := pool.Exec(ctx, `
		CREATE TABLE orders (id bigserial PRIMARY KEY, token_id text UNIQUE NOT NULL, sku text NOT NULL, qty int NOT NULL);
		CREATE TABLE carts (user_id text PRIMARY KEY, checked_out bool NOT NULL DEFAULT false);
		INSERT INTO carts (user_id) VALUES ('user-42')`); err != nil {
		panic(err)
	}
	payload := []byte(`{"sku":"book-1","qty":1}`)
	issued, err := kit.Issuer.Issue(ctx, pool, intent.Request{
		Tenant: "shop", Operation: "checkout.submit", IntentID: "render-7f3a",
		Subject: "user-42", TTLSeconds: 900, Payload: payload,
	})
	if err != nil {
		panic(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		resp, err := spender.SpendTx(ctx, tx, consume.Request{
			Tenant: "shop", Secret: issued.Secret, Operation: "checkout.submit",
			Subject: "user-42", Payload: payload,
		})
		if err != nil {
			return err // rolled back: the token stays spendable
		}
		if _, err := tx.Exec(ctx, `UPDATE carts SET checked_out = true WHERE user_id = $1`, "user-42"); err != nil {
			return err // rolled back together with the spend
		}
		fmt.Println(resp.Status, resp.State)
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output: 200 consumed
}
