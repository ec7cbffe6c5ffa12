package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokend/tokend/client"
)

// answer is what the stand-in tokend answers to one route.
type answer struct {
	status int
	body   string
}

// standIn answers each "METHOD /path" with what tokend answers to it; the
// client module depends on nothing of tokend's, so its examples talk to this
// stand-in. The same flows run against a real tokend in tokend's own module
// (internal/testkit/clienttest).
func standIn(routes map[string]answer) (url string, stop func()) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			a = answer{http.StatusNotFound, `{"status":404,"code":"not_found","title":"Not found"}`}
		}
		w.Header().Set("Content-Type", "application/json")
		if a.status >= 400 {
			w.Header().Set("Content-Type", "application/problem+json")
		}
		w.WriteHeader(a.status)
		fmt.Fprint(w, a.body)
	}))
	return ts.URL, ts.Close
}

const issued = `{"id":"tok_1","token":"tkn_secret","operation":"ledger.credit","subject":"user-42","state":"issued","expires_at":"2030-01-01T00:00:00Z","payload_digest":null}`

// orderID stands for the caller's own ID of one business intent, such as an
// order or a payment row, kept in the caller's database.
const orderID = "order-8412"

// A backend issues a token for one intent, then spends it. A timeout is
// answered by calling again with the same intent ID and the same token: the
// client already retried what was safe, and another call gets the stored
// outcome, never a second effect.
func Example() {
	url, stop := standIn(map[string]answer{
		"POST /v1/tokens":         {201, issued},
		"POST /v1/tokens/consume": {200, `{"token_id":"tok_1","state":"consumed","result":{"account":"acct-42","balance":5}}`},
	})
	defer stop()
	ctx := context.Background()
	c, err := client.New(url, "tkd_client_key") // tokend's URL and an API key
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

// A lease-mode operation (declared with mode lease) runs its effect at a
// payment provider: the spend grants a lease, the provider gets the lease's
// operation ID as its idempotency key, and the outcome is reported quoting
// the lease's generation.
func ExampleLease() {
	url, stop := standIn(map[string]answer{
		"POST /v1/tokens/consume":        {202, `{"token_id":"tok_1","state":"pending","generation":1,"lease_expires_at":"2030-01-01T00:00:00Z","operation_id":"op_1"}`},
		"POST /v1/tokens/tok_1/complete": {200, `{"token_id":"tok_1","state":"consumed","generation":1,"status":200}`},
	})
	defer stop()
	ctx := context.Background()
	c, err := client.New(url, "tkd_client_key")
	if err != nil {
		log.Fatal(err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: "tkn_secret", Operation: "pay.card", Subject: "user-42"})
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
func ExampleProblem() {
	url, stop := standIn(map[string]answer{
		"POST /v1/tokens/consume": {410, `{"type":"/problems/token_revoked","title":"Token revoked","status":410,"detail":"order cancelled","code":"token_revoked"}`},
	})
	defer stop()
	ctx := context.Background()
	c, err := client.New(url, "tkd_client_key")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Spend(ctx, client.SpendRequest{Token: "tkn_secret", Operation: "ledger.credit", Subject: "user-42",
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
func ExampleClient_Pages() {
	url, stop := standIn(map[string]answer{
		"GET /v1/admin/tokens": {200, `{"items":[{"id":"tok_1","tenant":"acme","operation":"pay.card","subject":"user-42","intent_id":"payment-78","state":"unknown","generation":1}],"next_cursor":null}`},
	})
	defer stop()
	ctx := context.Background()
	op, err := client.New(url, "tkd_operator_key")
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
