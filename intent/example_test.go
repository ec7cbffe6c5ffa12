package intent_test

import (
	"context"
	"fmt"

	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/tokendtest"
)

// A form page asks for a token for this rendering of the form; a reload that
// repeats the intent ID gets the same token back.
func ExampleIssuer_Issue() {
	ctx := context.Background()
	// The program's handlers; their built-in operations, like the example
	// ledger's ledger.credit, are issued without a declaration. The kit is
	// a database of the example's own; a program has its pool and keyring.
	kit, cleanup := tokendtest.ForExample(ledger.Handlers(), ledger.Migrations)
	defer cleanup()
	issuer := intent.NewIssuer(kit.Keys, intent.WithHandlers(kit.Handlers))
	req := intent.Request{
		Tenant:     "shop",
		Operation:  "ledger.credit",
		IntentID:   "render-7f3a", // kept on retry, new for a new intent
		Subject:    "user-42",
		TTLSeconds: 900,
		Payload:    []byte(`{"account":"user-42","amount":500}`),
	}
	first, err := issuer.Issue(ctx, kit.Pool, req)
	if err != nil {
		panic(err)
	}
	again, err := issuer.Issue(ctx, kit.Pool, req) // the reload
	if err != nil {
		panic(err)
	}
	fmt.Println(first.Token.State, first.Replayed, again.Replayed, again.Token.ID == first.Token.ID, again.Secret == first.Secret)
	// Output: issued false true true true
}
