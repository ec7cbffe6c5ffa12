package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tokend/tokend/client"
)

// orderID stands for the caller's own ID of one business intent, such as an
// order or a payment row, kept in the caller's database.
const orderID = "order-8412"

// A backend issues a token for one intent, then spends it. A timeout is
// answered by calling again with the same intent ID and the same token: the
// client already retried what was safe, and another call gets the stored
// outcome, never a second effect.
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", "tk_client_key")
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
}

// chargeCard stands for a payment provider's API, which takes an
// idempotency key of its own.
func chargeCard(ctx context.Context, idempotencyKey string, cents int) (string, error) {
	return "ch_1", nil
}

// A lease-mode operation (declared with mode lease) runs its effect at a
// payment provider: the spend grants a lease, the provider gets the lease's
// operation ID as its idempotency key, and the outcome is reported quoting
// the lease's generation.
func ExampleLease() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", "tk_client_key")
	if err != nil {
		log.Fatal(err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: "tks_…", Operation: "pay.card", Subject: "user-42"})
	if err != nil {
		log.Fatal(err)
	}
	if out.Lease == nil {
		fmt.Println("already finished:", out.State) // a replay of the stored outcome
		return
	}
	charge, err := chargeCard(ctx, out.Lease.OperationID, 1999)
	switch {
	case err == nil:
		_, err = out.Lease.Complete(ctx, 200, map[string]string{"charge": charge})
	case errors.Is(err, context.DeadlineExceeded):
		// Charged or not: nobody knows. An operator reconciles it.
		_, err = out.Lease.Unknown(ctx)
	default:
		_, err = out.Lease.Fail(ctx, 402, map[string]string{"reason": err.Error()})
	}
	if errors.Is(err, client.ErrStaleGeneration) {
		log.Print("the lease lapsed and went to another holder; it finishes the token")
	}
}

// Every error answer matches the sentinel of its code, and is a *Problem
// with the status, the detail and the request id of the server's log line.
func ExampleProblem() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", "tk_client_key")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Spend(ctx, client.SpendRequest{Token: "tks_…", Operation: "pay.card", Subject: "user-42"})
	var p *client.Problem
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		fmt.Println("wait until an operator reconciles the token; do not retry")
	case errors.Is(err, client.ErrTokenExpired), errors.Is(err, client.ErrTokenRevoked):
		fmt.Println("issue a new token under a new intent ID")
	case errors.As(err, &p):
		fmt.Println(p.Status, p.Code, p.Detail, p.RequestID)
	}
}

// An operator walks the listing page by page.
func ExampleClient_Pages() {
	ctx := context.Background()
	op, err := client.New("http://127.0.0.1:8080", "tk_operator_key")
	if err != nil {
		log.Fatal(err)
	}
	for page, err := range op.Pages(ctx, client.Filter{State: client.Unknown, Limit: 100}) {
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Items {
			fmt.Println(r.ID, r.Operation, r.Subject)
		}
	}
}
