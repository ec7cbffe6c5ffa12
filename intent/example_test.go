package intent_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/token"
)

// A form page asks for a token for this rendering of the form; a reload that
// repeats the intent ID gets the same token back.
func ExampleIssuer_Issue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TOKEND_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	keys, err := token.NewKeyring(os.Getenv("TOKEND_SECRET_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	// The program's handlers; their built-in operations, like the example
	// ledger's ledger.credit, are issued without a declaration.
	issuer := intent.NewIssuer(keys, intent.WithHandlers(ledger.Handlers()))
	issued, err := issuer.Issue(ctx, pool, intent.Request{
		Tenant:     "shop",
		Operation:  "ledger.credit",
		IntentID:   "render-7f3a", // kept on retry, new for a new intent
		Subject:    "user-42",
		TTLSeconds: 900,
		Payload:    []byte(`{"account":"user-42","amount":500}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(issued.Token.ID, issued.Secret.Reveal(), issued.Replayed)
}
