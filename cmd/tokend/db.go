package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/migrations"
)

// Pooling modes of TOKEND_DATABASE_POOLING.
const (
	// poolingSession: tokend talks to Postgres, or to a pooler in session
	// mode: a connection is one session for as long as tokend holds it.
	poolingSession = "session"
	// poolingTransaction: a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction) may hand each transaction another backend.
	poolingTransaction = "transaction"
)

// defaultMigrationLockTimeout is TOKEND_MIGRATION_LOCK_TIMEOUT's default.
const defaultMigrationLockTimeout = time.Minute

// sessionURL is where tokend needs a session of its own: migrations (their
// lock is a session's) and LISTEN for key revocations.
func (c dbConfig) sessionURL() string { return cmp.Or(c.SessionURL, c.DatabaseURL) }

// execMode is how statements are sent. Behind transaction pooling no named
// prepared statement may outlive its transaction (PgBouncer before 1.21
// would hand it to another client, or miss it on another backend), so
// statements are described once and sent unnamed.
func (c dbConfig) execMode() pgx.QueryExecMode {
	if c.Pooling == poolingTransaction {
		return pgx.QueryExecModeCacheDescribe
	}
	return pgx.QueryExecModeCacheStatement
}

// connect opens one connection to the database, for the short commands.
func (c dbConfig) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := db.ConnConfig(c.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cc.DefaultQueryExecMode = c.execMode()
	return pgx.ConnectConfig(ctx, cc)
}

// applyMigrations applies the schema on a session of its own, waiting at
// most MigrationLockTimeout for a lock another process holds, and says how
// many migrations it applied.
func (c dbConfig) applyMigrations(ctx context.Context) (int, error) {
	cc, err := db.ConnConfig(c.sessionURL())
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	timeout := cmp.Or(c.MigrationLockTimeout, defaultMigrationLockTimeout)
	cc.RuntimeParams["lock_timeout"] = strconv.FormatInt(timeout.Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	for _, set := range []migrations.Set{migrations.Schema, ledger.Migrations} {
		var applied int
		applied, err = set.Apply(ctx, conn)
		n += applied
		if err != nil {
			break
		}
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable {
		return n, fmt.Errorf("migrations: waited %s (TOKEND_MIGRATION_LOCK_TIMEOUT) for a lock another session holds: "+
			"another tokend migrating, or a session left holding the migration lock (through a transaction-pooling proxy, set TOKEND_DATABASE_SESSION_URL): %w", timeout, err)
	}
	return n, err
}

// applyPoolConfig makes pc send statements as c's pooling requires.
func (c dbConfig) applyPoolConfig(pc *pgxpool.Config) {
	pc.ConnConfig.DefaultQueryExecMode = c.execMode()
}
