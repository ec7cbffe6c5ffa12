package tokend_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
	"github.com/tokend/tokend/tokendtest"
)

// Credit is the payload of wallet.credit: which account, how much.
type Credit struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Validate refuses a credit that could never be spent; tokend asks it at
// issue, so no such token is issued.
func (c Credit) Validate() error {
	if c.Amount <= 0 {
		return tokend.Invalid(consume.ErrInvalidPayload, "amount", "must be positive")
	}
	return nil
}

// A program embeds tokend: it registers an operation with its typed
// handler, builds an issuer and a spender on one keyring and one registry,
// issues a token for an intent and spends it in its own transaction. The
// second spend of the same token replays the stored outcome: the wallet is
// credited once.
func Example() {
	ctx := context.Background()

	handlers := consume.NewRegistry()
	consume.RegisterFunc(handlers, operation.Policy{Name: "wallet.credit"},
		func(ctx context.Context, tx pgx.Tx, c consume.Call, in Credit) (consume.Outcome, error) {
			var balance int64
			err := tx.QueryRow(ctx, `
				INSERT INTO wallets (tenant, account, balance) VALUES ($1, $2, $3)
				ON CONFLICT (tenant, account) DO UPDATE SET balance = wallets.balance + $3
				RETURNING balance`, c.Tenant, in.Account, in.Amount).Scan(&balance)
			return consume.Outcome{Status: 200, Result: map[string]int64{"balance": balance}}, err
		})

	// A database of the example's own, migrated to tokend's schema (a
	// program runs migrations.Apply at start), with the program's table.
	db, cleanup := tokendtest.ForExample(nil)
	defer cleanup()
	pool := db.Pool
	if _, err := pool.Exec(ctx, `CREATE TABLE wallets (tenant text, account text, balance bigint NOT NULL,
		PRIMARY KEY (tenant, account))`); err != nil {
		panic(err)
	}

	keys, err := token.NewKeyring(tokendtest.ServerKey) // the program's server key
	if err != nil {
		panic(err)
	}
	issuer := intent.NewIssuer(keys, intent.WithHandlers(handlers))
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		panic(err)
	}

	payload := []byte(`{"account":"alice","amount":500}`)
	issued, err := issuer.Issue(ctx, pool, intent.Request{
		Tenant: "shop", Operation: "wallet.credit", IntentID: "topup-17",
		Subject: "alice", TTLSeconds: 900, Payload: payload,
	})
	if err != nil {
		panic(err)
	}

	spend := consume.Request{Tenant: "shop", Secret: issued.Secret, Operation: "wallet.credit",
		Subject: "alice", Payload: payload}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			resp, err := spender.SpendTx(ctx, tx, spend)
			if err != nil {
				return err // rolled back: the token stays spendable
			}
			fmt.Println(resp.Status, resp.State, "replayed:", resp.Replayed)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}

	var balance int64
	if err := pool.QueryRow(ctx, `SELECT balance FROM wallets WHERE account = 'alice'`).Scan(&balance); err != nil {
		panic(err)
	}
	fmt.Println("balance:", balance)

	// A payload Validate refuses is refused at issue, nothing written.
	_, err = issuer.Issue(ctx, pool, intent.Request{
		Tenant: "shop", Operation: "wallet.credit", IntentID: "topup-18",
		Subject: "alice", TTLSeconds: 900, Payload: []byte(`{"account":"alice","amount":0}`),
	})
	var bad *tokend.InvalidInputError
	if errors.As(err, &bad) {
		fmt.Println(bad.Field, bad.Reason)
	}
	// Output:
	// 200 consumed replayed: false
	// 200 consumed replayed: true
	// balance: 500
	// payload.amount must be positive
}
