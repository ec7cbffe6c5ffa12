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
	"github.com/tokend/tokend/token"
)

// An operator checked with the payment provider: the capture behind a token
// whose outcome was unknown did happen. Every later spend of the token gets
// this result back, as if the holder had reported it.
func ExampleReconcile() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TOKEND_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	rec, err := admin.Reconcile(ctx, pool, "acme", "tok_06h3e0h5jv1c2n6ba3dq1u0vb8", admin.Reconciliation{
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
	fmt.Printf("%s %d %s\n", rec.State, rec.ResultStatus, rec.ResultBody)
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
