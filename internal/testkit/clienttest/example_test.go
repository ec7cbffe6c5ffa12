// The client module's examples (client/example_test.go) talk to a stand-in;
// these run the same flows against a real tokend, so what the stand-in
// answers is what tokend answers.
package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"time"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/ledgerapi"
	"github.com/tokend/tokend/tokendtest"
)

// exampleTokend runs tokend's REST API, as `tokend serve` does, on a
// database of its own with the ledger's handlers, and returns its URL and a
// client and an operator key of tenant acme: what an example's program is
// configured with. cleanup stops it.
func exampleTokend() (url, clientKey, operatorKey string, cleanup func()) {
	kit, done := tokendtest.ForExample(ledger.Handlers(), ledger.Migrations)
	srv, err := httpapi.New(httpapi.Config{
		Pool: kit.Pool, Issuer: kit.Issuer, Spender: kit.Spender,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mounts: []httpapi.Mount{ledgerapi.Mount(kit.Pool)},
	})
	if err != nil {
		done()
		log.Fatal(err)
	}
	key := func(role apikey.Role) string {
		_, secret, err := apikey.Create(context.Background(), kit.Pool, "acme", role)
		if err != nil {
			done()
			log.Fatal(err)
		}
		return secret
	}
	clientKey, operatorKey = key(apikey.Client), key(apikey.Operator)
	ts := httptest.NewServer(srv)
	return ts.URL, clientKey, operatorKey, func() { ts.Close(); done() }
}

// orderID stands for the caller's own ID of one business intent, such as an
// order or a payment row, kept in the caller's database.
const orderID = "order-8412"

// A backend issues a token for one intent, then spends it. A timeout is
// answered by calling again with the same intent ID and the same token: the
// client already retried what was safe, and another call gets the stored
// outcome, never a second effect.
func Example_spend() {
	ctx := context.Background()
	url, clientKey, _, stop := exampleTokend() // the server's URL and an API key
	defer stop()
	c, err := client.New(url, clientKey)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.Issue(ctx, client.IssueRequest{
		IntentID:   orderID, // the intent, never made up by the client
		Operation:  "ledger.credit",
		Subject:    "user-42",
		TTLSeconds: 600,
		Payload:    map[string]any{"account": "acct-42", "amount": 5},
	})
	if err != nil {
		log.Fatal(err)
	}
	spend := client.SpendRequest{Token: tok.Token, Operation: "ledger.credit", Subject: "user-42",
		Payload: map[string]any{"account": "acct-42", "amount": 5}}
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := c.Spend(callCtx, spend)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			continue // the same spend again: it replays if the first one ran
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out.State, out.Replayed, string(out.Result))
		return
	}
	// Output: consumed false {"account":"acct-42","balance":5}
}

// chargeCard stands for a payment provider's API, which takes an
// idempotency key of its own.
func chargeCard(ctx context.Context, idempotencyKey string, cents int) (string, error) {
	return "ch_1", nil
}

// leaseToken declares pay.card in lease mode, as an operator does once, and
// issues a token of it for user-42.
func leaseToken(ctx context.Context, url, clientKey, operatorKey, intentID string) string {
	op, err := client.New(url, operatorKey)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := op.PutOperation(ctx, "pay.card", client.Policy{Mode: "lease"}); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(url, clientKey)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.Issue(ctx, client.IssueRequest{IntentID: intentID, Operation: "pay.card", Subject: "user-42", TTLSeconds: 600})
	if err != nil {
		log.Fatal(err)
	}
	return tok.Token
}

// A lease-mode operation (declared with mode lease) runs its effect at a
// payment provider: the spend grants a lease, the provider gets the lease's
// operation ID as its idempotency key, and the outcome is reported quoting
// the lease's generation.
func Example_lease() {
	ctx := context.Background()
	url, clientKey, operatorKey, stop := exampleTokend()
	defer stop()
	secret := leaseToken(ctx, url, clientKey, operatorKey, "payment-77")
	c, err := client.New(url, clientKey)
	if err != nil {
		log.Fatal(err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: secret, Operation: "pay.card", Subject: "user-42"})
	if err != nil {
		log.Fatal(err)
	}
	if out.Lease == nil {
		fmt.Println("already finished:", out.State) // a replay of the stored outcome
		return
	}
	var rec *client.Recorded
	charge, err := chargeCard(ctx, out.Lease.OperationID, 1999)
	switch {
	case err == nil:
		rec, err = out.Lease.Complete(ctx, 200, map[string]string{"charge": charge})
	case errors.Is(err, context.DeadlineExceeded):
		// Charged or not: nobody knows. An operator reconciles it.
		rec, err = out.Lease.Unknown(ctx)
	default:
		rec, err = out.Lease.Fail(ctx, 402, map[string]string{"reason": err.Error()})
	}
	if errors.Is(err, client.ErrStaleGeneration) {
		log.Print("the lease lapsed and went to another holder; it finishes the token")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.State, rec.Status)
	// Output: consumed 200
}

// Every error answer matches the sentinel of its code, and is a *Problem
// with the status, the detail and the request id of the server's log line.
// Here the token was revoked by an operator before the spend.
func Example_problem() {
	ctx := context.Background()
	url, clientKey, operatorKey, stop := exampleTokend()
	defer stop()
	c, err := client.New(url, clientKey)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := c.Issue(ctx, client.IssueRequest{IntentID: orderID, Operation: "ledger.credit", Subject: "user-42", TTLSeconds: 600,
		Payload: map[string]any{"account": "acct-42", "amount": 5}})
	if err != nil {
		log.Fatal(err)
	}
	op, err := client.New(url, operatorKey)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := op.Revoke(ctx, tok.ID, "order cancelled"); err != nil {
		log.Fatal(err)
	}

	_, err = c.Spend(ctx, client.SpendRequest{Token: tok.Token, Operation: "ledger.credit", Subject: "user-42",
		Payload: map[string]any{"account": "acct-42", "amount": 5}})
	var p *client.Problem
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		fmt.Println("wait until an operator reconciles the token; do not retry")
	case errors.Is(err, client.ErrTokenExpired), errors.Is(err, client.ErrTokenRevoked):
		fmt.Println("issue a new token under a new intent ID")
	case errors.As(err, &p):
		fmt.Println(p.Status, p.Code, p.Detail, p.RequestID)
	}
	// Output: issue a new token under a new intent ID
}

// An operator walks the listing page by page: here the tokens whose
// outcome is unknown, one of them, whose lease holder lost track of it.
func Example_pages() {
	ctx := context.Background()
	url, clientKey, operatorKey, stop := exampleTokend()
	defer stop()
	c, err := client.New(url, clientKey)
	if err != nil {
		log.Fatal(err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: leaseToken(ctx, url, clientKey, operatorKey, "payment-78"), Operation: "pay.card", Subject: "user-42"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := out.Lease.Unknown(ctx); err != nil {
		log.Fatal(err)
	}

	op, err := client.New(url, operatorKey)
	if err != nil {
		log.Fatal(err)
	}
	for page, err := range op.Pages(ctx, client.Filter{State: client.Unknown, Limit: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Items {
			fmt.Println(r.Operation, r.Subject, r.State) // and r.ID
		}
	}
	// Output: pay.card user-42 unknown
}
