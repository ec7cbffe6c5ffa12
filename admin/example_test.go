package admin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

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

// Each tokend process runs a sweeper; only one sweeps at a time. Here it
// expires a token whose time ran out, and the program stops it after the
// first sweep that changed something.
func ExampleSweeper() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	kit, cleanup := tokendtest.ForExample(nil)
	defer cleanup()
	if _, err := operation.Put(ctx, kit.Pool, "acme", operation.Policy{Name: "payment.capture", Mode: operation.Lease}, kit.Handlers); err != nil {
		log.Fatal(err)
	}
	if _, err := kit.Issuer.Issue(ctx, kit.Pool, intent.Request{Tenant: "acme", Operation: "payment.capture", IntentID: "i-1", Subject: "order-7", TTLSeconds: 1}); err != nil {
		log.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the token's second runs out

	// The logger prints what each sweep did; a program logs it as JSON.
	logger := slog.New(sweepLog{stop: stop})
	s, err := admin.NewSweeper(admin.SweeperConfig{Pool: kit.Pool, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	// Output: admin: swept expired=1
}

// sweepLog prints the sweeper's "swept" lines with the tokens it expired,
// then stops the sweeper.
type sweepLog struct {
	slog.Handler
	stop func()
}

func (h sweepLog) Enabled(context.Context, slog.Level) bool { return true }

func (h sweepLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "admin: swept" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "expired" {
			fmt.Printf("%s expired=%v\n", r.Message, a.Value)
		}
		return true
	})
	h.stop()
	return nil
}
