package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/infra/store"
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
// most MigrationLockTimeout in all for the locks it needs (each DDL's wait
// cut short and retried, migrations.Options), and says how many
// migrations it applied.
//
// It first checks that the session URL keeps a session (checkSession):
// migrations and LISTEN need one, and a transaction-pooling proxy that
// seems to work at start fails requests later.
func (c dbConfig) applyMigrations(ctx context.Context, log *slog.Logger) (int, error) {
	if err := c.checkSession(ctx); err != nil {
		return 0, err
	}
	cc, err := db.ConnConfig(c.sessionURL())
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	timeout := cmp.Or(c.MigrationLockTimeout, defaultMigrationLockTimeout)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := store.SetLockTimeout(ctx, conn, timeout); err != nil {
		return 0, fmt.Errorf("migrations: set lock_timeout: %w", err)
	}
	var n int
	for _, set := range []migrations.Set{migrations.Schema, ledger.Migrations} {
		var applied int
		applied, err = set.ApplyWith(ctx, conn, migrations.Options{WaitFor: timeout, Logger: log})
		n += applied
		if err != nil {
			break
		}
	}
	if store.LockNotAvailable(err) || store.Deadlock(err) {
		return n, fmt.Errorf("migrations: waited %s (TOKEND_MIGRATION_LOCK_TIMEOUT) for locks, each DDL's wait cut at %s and retried: "+
			"end the session named (pg_terminate_backend), or run tokend migrate again when it is gone: %w", timeout, migrations.DefaultLockTimeout, err)
	}
	return n, err
}

// allowSuperuserVar lets serve run as a superuser.
const allowSuperuserVar = "TOKEND_ALLOW_SUPERUSER"

// checkRole refuses to serve as a Postgres superuser unless allowed: a
// superuser bypasses row security and grants, and can read files and run
// programs on the database host, so a flaw in tokend would have the whole
// cluster. Allowed, it says so in the log. docs/operations.md has the
// runtime role's grants.
func (c dbConfig) checkRole(ctx context.Context, allowed bool, log *slog.Logger) error {
	cc, err := db.ConnConfig(c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	// The simple protocol: no prepared statement that a transaction pooler
	// could leave on a backend another connection gets next, turning this
	// check into an error before checkSession tells that case in its words.
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	role, super, err := store.Superuser(ctx, conn)
	switch {
	case err != nil:
		return fmt.Errorf("database: %w", err)
	case !super:
		return nil
	case allowed:
		log.Warn("serving as a superuser, because "+allowSuperuserVar+"=1; give serve a runtime role instead (docs/operations.md)", "role", role)
		return nil
	}
	return fmt.Errorf("TOKEND_DATABASE_URL connects as %q, a superuser: serve refuses to run as one; connect as a runtime role with only the grants serve needs (docs/operations.md), or set %s=1", role, allowSuperuserVar)
}

// errNoSession is why tokend refuses to start on a connection that does
// not keep a session.
var errNoSession = errors.New("does not keep session state between transactions, as a pooler in transaction mode (PgBouncer's pool_mode = transaction) does")

// checkSession checks that the session URL keeps a session: a setting made
// on one connection is still there on its next statement, on the same
// backend, while another connection holds a transaction open (a pooler in
// transaction mode hands a freed backend to the next transaction, and the
// connection's next statement to another). A pooler that does not keep
// session state would pass a first glance and then fail requests (a
// prepared statement, an advisory lock, LISTEN on another backend), so
// tokend refuses to start instead, in one line naming the setting.
//
// Without TOKEND_DATABASE_POOLING=transaction the requests' URL is checked
// too when a session URL is set apart from it: requests then use named
// prepared statements, which a transaction pooler in front of that URL
// loses, so a direct session URL alone must not hide that pooler.
func (c dbConfig) checkSession(ctx context.Context) error {
	if c.Pooling != poolingTransaction && c.SessionURL != "" && c.SessionURL != c.DatabaseURL {
		err := keepsSession(ctx, c.DatabaseURL)
		if errors.Is(err, errNoSession) {
			return fmt.Errorf("TOKEND_DATABASE_URL %w; set TOKEND_DATABASE_POOLING=transaction (TOKEND_DATABASE_SESSION_URL is set, to a URL with sessions of their own)", err)
		}
		if err != nil {
			return err
		}
	}
	err := keepsSession(ctx, c.sessionURL())
	if !errors.Is(err, errNoSession) {
		return err
	}
	if c.Pooling == poolingTransaction {
		return fmt.Errorf("TOKEND_DATABASE_SESSION_URL %w; with TOKEND_DATABASE_POOLING=transaction it must reach Postgres directly or through session pooling", err)
	}
	return fmt.Errorf("TOKEND_DATABASE_URL %w; set TOKEND_DATABASE_POOLING=transaction, and TOKEND_DATABASE_SESSION_URL to a direct or session-pooled URL", err)
}

// keepsSession returns errNoSession when connections to url do not keep
// their session, nil when they do, or the error that kept it from telling.
func keepsSession(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cc, err := db.ConnConfig(url)
	if err != nil {
		return err
	}
	// The simple protocol: no prepared statement that a pooler could lose
	// and turn into another error than the one looked for.
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer b.Close(context.WithoutCancel(ctx))
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	want := hex.EncodeToString(nonce[:])
	pidA, err := store.MarkSession(ctx, a, want)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	for range 3 {
		tx, err := b.Begin(ctx)
		if err != nil {
			return fmt.Errorf("database: %w", err)
		}
		pidB, err := store.BackendPID(ctx, tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			return fmt.Errorf("database: %w", err)
		}
		// A session answers at once; a pooler out of backends makes it
		// wait for b's, which is as telling.
		qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
		pid, got, err := store.ReadSession(qctx, a)
		waited := qctx.Err() != nil
		qcancel()
		_ = tx.Rollback(ctx)
		switch {
		case pidB == pidA, waited, err == nil && (pid != pidA || got != want):
			return errNoSession
		case err != nil:
			return fmt.Errorf("database: %w", err)
		}
	}
	return nil
}

// applyPoolConfig makes pc send statements as c's pooling requires, and
// trace them when tracing is on.
func (c dbConfig) applyPoolConfig(pc *pgxpool.Config) {
	pc.ConnConfig.DefaultQueryExecMode = c.execMode()
	if c.tracer != nil {
		pc.ConnConfig.Tracer = c.tracer
	}
}
