package ledger_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/migrations"
	"github.com/tokend/tokend/tokendtest"
)

// A program adds the ledger as tokend serve does, through the public API
// any business uses: its tables after tokend's, its handlers and built-in
// policies in the program's registry.
func ExampleRegister() {
	ctx := context.Background()
	// A database of the example's own; a program connects to its own.
	kit, cleanup := tokendtest.ForExample(nil)
	defer cleanup()
	conn, err := kit.Pool.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// tokend's migrations, then the ledger's: a set already applied (as in
	// the kit's database) applies nothing.
	for _, set := range []migrations.Set{migrations.Schema, ledger.Migrations} {
		if _, err := set.Apply(ctx, conn.Conn()); err != nil {
			log.Fatal(err)
		}
	}
	conn.Release()

	handlers := consume.NewRegistry()
	ledger.Register(handlers) // ledger.credit and ledger.debit, for every tenant
	issuer := intent.NewIssuer(kit.Keys, intent.WithHandlers(handlers))
	spender, err := consume.New(consume.Config{Handlers: handlers, Keys: kit.Keys})
	if err != nil {
		log.Fatal(err)
	}
	payload := []byte(`{"account":"alice","amount":70}`)
	issued, err := issuer.Issue(ctx, kit.Pool, intent.Request{Tenant: "acme", Operation: ledger.Credit, IntentID: "i-1", Subject: "alice", TTLSeconds: 60, Payload: payload})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := spender.Spend(ctx, kit.Pool, consume.Request{Tenant: "acme", Secret: issued.Secret, Operation: ledger.Credit, Subject: "alice", Payload: payload}); err != nil {
		log.Fatal(err)
	}
	balance, err := ledger.Balance(ctx, kit.Pool, "acme", "alice")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(balance)
	// Output: 70
}
