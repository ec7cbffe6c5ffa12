// Package db names what tokend's packages need of a database handle. A
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all have it, so every function
// that reads or writes runs on the caller's transaction as well as on a pool.
package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Beginner starts a transaction: a pool, a connection, or a transaction
// (which starts a savepoint). A convenience that only runs its ...Tx form in
// a transaction of its own takes one.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// DBTX is a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RowError is the error of a read of one row: nil when the row was found,
// missing when there was none, and any other error wrapped with what the
// read was (as in "inspect: get"). It is the one place pgx's "no rows" is
// turned into a package's own error.
func RowError(err, missing error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return missing
	}
	return fmt.Errorf("%s: %w", what, err)
}

// NoRow reports whether err says a read of one row found none, for reads
// where that is no error.
func NoRow(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// ConnConfig parses url, a pool's URL as pgxpool takes it, for a connection
// of its own: the pool's settings in it (pool_max_conns, pool_min_conns, ...)
// are left out. pgx alone would send them to Postgres as run-time
// parameters, which it refuses, so a URL that serves the pool could not
// migrate.
func ConnConfig(url string) (*pgx.ConnConfig, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pc.ConnConfig, nil
}
