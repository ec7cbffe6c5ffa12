package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/admin"
)

// startSweeper runs the retention sweeper on pool every interval until ctx
// ends or stop is called. stop returns once the sweeper has given back its
// connection and its lock, so that the pool may be closed after it.
func startSweeper(ctx context.Context, pool *pgxpool.Pool, interval, eventRetention time.Duration, log *slog.Logger) (stop func(), err error) {
	s, err := admin.NewSweeper(admin.SweeperConfig{Pool: pool, Interval: interval, EventRetention: eventRetention, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx) // returns only when ctx ends, with ctx's error
	}()
	return func() { cancel(); <-done }, nil
}
