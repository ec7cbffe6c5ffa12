package tokendtest_test

import (
	"context"
	"fmt"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/tokendtest"
)

// A test of a program's handlers gets a database of its own with an issuer
// and a spender wired to them: here the example ledger's, issued and spent
// once. In a test, call tokendtest.New(t, handlers); an Example has no t.
func ExampleNew() {
	ctx := context.Background()
	kit, cleanup := tokendtest.ForExample(ledger.Handlers(), ledger.Migrations)
	defer cleanup()

	issued, err := kit.Issuer.Issue(ctx, kit.Pool, intent.Request{
		Tenant: "shop", Operation: ledger.Credit, IntentID: "render-1",
		Subject: "user-42", TTLSeconds: 900, Payload: []byte(`{"account":"user-42","amount":500}`),
	})
	if err != nil {
		panic(err)
	}
	resp, err := kit.Spender.Spend(ctx, kit.Pool, consume.Request{
		Tenant: "shop", Secret: issued.Secret, Operation: ledger.Credit,
		Subject: "user-42", Payload: []byte(`{"account":"user-42","amount":500}`),
	})
	if err != nil {
		panic(err)
	}
	balance, err := ledger.Balance(ctx, kit.Pool, "shop", "user-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(issued.Token.State, resp.Status, resp.State, balance)
	// Output: issued 200 consumed 500
}
