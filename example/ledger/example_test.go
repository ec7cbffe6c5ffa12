package ledger_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/migrations"
	"github.com/tokend/tokend/token"
)

// A program adds the ledger as tokend serve does, through the public API
// any business uses: its tables after tokend's, its handlers and built-in
// policies in the program's registry.
func ExampleRegister() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("TOKEND_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, set := range []migrations.Set{migrations.Schema, ledger.Migrations} {
		if _, err := set.Apply(ctx, conn); err != nil {
			log.Fatal(err)
		}
	}

	handlers := consume.NewRegistry()
	ledger.Register(handlers) // ledger.credit and ledger.debit, for every tenant
	keys, err := token.NewKeyring(os.Getenv("TOKEND_SECRET_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	issuer := intent.NewIssuer(keys, intent.WithHandlers(handlers))
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = issuer, spender
}
