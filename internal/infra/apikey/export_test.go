package apikey

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WatchDeaf is Watch whose self-notification is never sent, as behind a
// transaction-pooling proxy, with short waits.
func WatchDeaf(ctx context.Context, pool *pgxpool.Pool, reset func(), probeWait, pollEvery time.Duration) error {
	w := watcher{pool: pool, revoked: func([]byte) {}, reset: reset, log: slog.New(slog.DiscardHandler),
		probeWait: probeWait, pollEvery: pollEvery, probe: func(context.Context) error { return nil }}
	return w.run(ctx)
}
