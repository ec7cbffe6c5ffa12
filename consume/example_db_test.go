package consume_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

// TestExampleFlowOnRealDatabase runs ExampleSpender_SpendTx's flow against a
// real database: the caller's row and the spend commit together, and a
// rolled-back attempt leaves the token spendable.
func TestExampleFlowOnRealDatabase(t *testing.T) {
	t.Parallel()
	handlers := consume.NewRegistry()
	handlers.Register("checkout.submit", consume.HandlerFunc(
		func(ctx context.Context, tx pgx.Tx, c consume.Call) (consume.Outcome, error) {
			var orderID int64
			err := tx.QueryRow(ctx, `INSERT INTO orders (token_id, body) VALUES ($1, $2) RETURNING id`, c.TokenID, c.Payload).Scan(&orderID)
			return consume.Outcome{Status: 200, Result: map[string]int64{"order_id": orderID}}, err
		}))
	e := newEnvWith(t, consume.Config{Handlers: handlers})
	ctx := context.Background()
	e.exec(`CREATE TABLE orders (id bigserial PRIMARY KEY, token_id text UNIQUE NOT NULL, body jsonb NOT NULL)`)
	e.exec(`CREATE TABLE carts (user_id text PRIMARY KEY, checked_out bool NOT NULL DEFAULT false)`)
	e.exec(`INSERT INTO operations (tenant_id, name, mode) VALUES ($1, 'checkout.submit', 'atomic')`, tenant)
	is := e.issue("checkout.submit", "user-42", nil)

	attempt := func(cartExists bool) error {
		return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := e.spender.SpendTx(ctx, tx, consume.Request{
				Tenant: tenant, Secret: is.Secret, Operation: "checkout.submit",
				Subject: "user-42", Payload: []byte(`{"sku":"book-1","qty":1}`),
			}); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `UPDATE carts SET checked_out = true WHERE user_id = 'user-42'`)
			if err == nil && tag.RowsAffected() == 0 {
				return pgx.ErrNoRows // the caller's own update found nothing: roll back
			}
			return err
		})
	}
	if err := attempt(false); err == nil {
		t.Fatal("attempt without a cart committed")
	}
	if s := e.state(is.Token.ID); s != token.Issued {
		t.Fatalf("token is %s after the rolled-back attempt, want issued", s)
	}
	e.exec(`INSERT INTO carts (user_id) VALUES ('user-42')`)
	if err := attempt(true); err != nil {
		t.Fatal(err)
	}
	var orders int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 1 {
		t.Fatalf("orders = %d (%v), want 1", orders, err)
	}
	if s := e.state(is.Token.ID); s != token.Consumed {
		t.Fatalf("token is %s, want consumed", s)
	}
	_ = intent.APIVersion
}
