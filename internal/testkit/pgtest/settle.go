package pgtest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SettleTimeout bounds a test's wait for its events to be positioned in the
// feed, and for what follows from them (a webhook delivered, a page read).
// Positions go to events once every older transaction on the server has
// ended, in any database: the other tests' too. On a busy machine a
// CREATE DATABASE from the template, which every test runs, holds one for
// tens of seconds on a Citus worker (seen: 11 s at load 13, over 30 s in a
// full Citus pass). It is a hang bound, not a speed assertion.
const SettleTimeout = 2 * time.Minute

// Unsettled names the oldest transactions holding a transaction id on the
// server pool talks to (any database), for the message of a test whose
// events stayed unpositioned past SettleTimeout: they are what held the
// feed back. On Citus it sees the coordinator only.
func Unsettled(pool *pgxpool.Pool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s string
	err := pool.QueryRow(ctx, `
		SELECT coalesce(string_agg(format('pid %s in %s, %s for %s s, xid %s: %s', pid, datname, state,
		                                  round(extract(epoch FROM now() - xact_start)), backend_xid, left(query, 160)),
		                           '; ' ORDER BY xact_start), 'none')
		FROM (SELECT * FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start LIMIT 5) a`).Scan(&s)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return "the oldest transactions with an id on the server: " + s
}
