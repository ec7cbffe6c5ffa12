package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/operation"
	"github.com/tokend/tokend/token"
	"github.com/tokend/tokend/tokendtest"
)

// An operator checked with the payment provider: the capture behind a token
// whose outcome was unknown did happen. Every later spend of the token gets
// this result back, as if the holder had reported it.
func ExampleReconcile() {
	ctx := context.Background()
	// A database of the example's own, with a token whose lease holder
	// reported that it does not know how the capture ended.
	kit, cleanup := tokendtest.ForExample(nil)
	defer cleanup()
	pool := kit.Pool
	id := unknownToken(ctx, kit)

	rec, err := admin.Reconcile(ctx, pool, "acme", id, admin.Reconciliation{
		Outcome: admin.Succeeded,
		Result:  map[string]string{"capture_id": "cap_8f2k"},
		Actor:   "ops@acme",
	})
	switch {
	case errors.Is(err, token.ErrInvalidState):
		log.Fatal("not unknown (any more): ", err) // someone else got there first
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(rec.State, rec.ResultStatus)
	// Output: consumed 200
}

// unknownToken issues a lease-mode token, leases it and reports its outcome
// unknown, as a holder that lost track of a capture does.
func unknownToken(ctx context.Context, kit *tokendtest.Kit) string {
	if _, err := operation.Put(ctx, kit.Pool, "acme", operation.Policy{Name: "payment.capture", Mode: operation.Lease}, kit.Handlers); err != nil {
		log.Fatal(err)
	}
	issued, err := kit.Issuer.Issue(ctx, kit.Pool, intent.Request{Tenant: "acme", Operation: "payment.capture", IntentID: "i-1", Subject: "order-7", TTLSeconds: 900})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := kit.Spender.Spend(ctx, kit.Pool, consume.Request{Tenant: "acme", Secret: issued.Secret, Operation: "payment.capture", Subject: "order-7"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := consume.Finish(ctx, kit.Pool, token.ReportUnknown, consume.Report{Tenant: "acme", TokenID: resp.TokenID, Generation: resp.Lease.Generation, Actor: "worker"}); err != nil {
		log.Fatal(err)
	}
	return resp.TokenID
}

// Each tokend process runs a sweeper; only one sweeps at a time.
func ExampleSweeper() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("TOKEND_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	s, err := admin.NewSweeper(admin.SweeperConfig{Pool: pool, Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
