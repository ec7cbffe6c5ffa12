package store

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// LockNotAvailable reports whether err is a lock wait that ran out
// (lock_timeout, or NOWAIT).
func LockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// Deadlock reports whether err is Postgres ending a deadlock by failing
// this transaction (SQLSTATE 40P01).
func Deadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected
}

// NotText reports whether err is Postgres refusing a string it cannot store:
// an invalid byte sequence (a NUL or invalid UTF-8 in a text value) or an
// untranslatable character (\u0000 in jsonb).
func NotText(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.CharacterNotInRepertoire || pgErr.Code == pgerrcode.UntranslatableCharacter)
}

// Unavailable reports whether err means the database cannot be reached or
// asked the client to come back, as opposed to a bug.
func Unavailable(err error) bool {
	if errors.Is(err, ErrCommitUnknown) {
		return true // a retry finds what happened
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, // shutting down, starting up
			pgerrcode.TooManyConnections,
			pgerrcode.SerializationFailure, pgerrcode.DeadlockDetected, // safe to retry
			pgerrcode.LockNotAvailable: // a lock wait ran out: the statement changed nothing
			return true
		}
		return pgerrcode.IsConnectionException(pgErr.Code)
	}
	var (
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		// The server went away mid-conversation (a crash, an immediate
		// shutdown, a proxy closing): pgconn returns the read error as is.
		// Request bodies never get here: Decode reports their EOFs itself.
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
