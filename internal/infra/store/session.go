package store

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/db"
)

// Listen makes conn listen on channel (LISTEN, the channel quoted as an
// identifier).
func Listen(ctx context.Context, conn *pgx.Conn, channel string) error {
	_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	return err
}

// SetLockTimeout sets lock_timeout on conn's session: set on the session,
// not as a startup parameter, which a pooler may refuse (PgBouncer:
// "unsupported startup parameter").
func SetLockTimeout(ctx context.Context, conn *pgx.Conn, d time.Duration) error {
	_, err := conn.Exec(ctx, "SET lock_timeout = "+strconv.FormatInt(d.Milliseconds(), 10))
	return err
}

// LockHoldersSQL lists, oldest transaction first, the other sessions of
// the current database holding an advisory lock (tern's migration lock is
// one) or a lock on a table, with what pg_stat_activity says of them.
const LockHoldersSQL = `
SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),
       coalesce(a.state, ''), coalesce(extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start))::bigint, 0),
       string_agg(DISTINCT CASE WHEN l.locktype = 'advisory' THEN 'an advisory lock'
                                ELSE l.mode || ' on ' || l.relation::regclass::text END, ', ')
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid() AND a.datname = current_database()
  AND (l.locktype = 'advisory' OR (l.locktype = 'relation' AND l.relation >= 16384))
GROUP BY a.pid, a.application_name, a.client_addr, a.state, a.xact_start, a.backend_start
ORDER BY coalesce(a.xact_start, a.backend_start)
LIMIT 5`

// LockHolder is a session holding a lock (LockHoldersSQL).
type LockHolder struct {
	PID                int32
	App, Client, State string
	ForSeconds         int64
	Locks              string
}

// LockHolders reads the other sessions holding locks (LockHoldersSQL).
func LockHolders(ctx context.Context, q db.DBTX) ([]LockHolder, error) {
	rows, err := q.Query(ctx, LockHoldersSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LockHolder, error) {
		var h LockHolder
		err := r.Scan(&h.PID, &h.App, &h.Client, &h.State, &h.ForSeconds, &h.Locks)
		return h, err
	})
}

// Statements of the session check: a setting made on one connection,
// read back on it while another holds a transaction.
const (
	// SessionMarkSQL sets tokend.session_check to $1 for the session.
	SessionMarkSQL = `SELECT pg_backend_pid(), set_config('tokend.session_check', $1, false)`
	// BackendPIDSQL is the backend's process id.
	BackendPIDSQL = `SELECT pg_backend_pid()`
	// SessionReadSQL reads tokend.session_check back, '' when unset.
	SessionReadSQL = `SELECT pg_backend_pid(), coalesce(current_setting('tokend.session_check', true), '')`
)

// MarkSession sets the session's tokend.session_check to mark
// (SessionMarkSQL) and answers the backend's process id.
func MarkSession(ctx context.Context, q db.DBTX, mark string) (pid int32, err error) {
	err = q.QueryRow(ctx, SessionMarkSQL, mark).Scan(&pid, new(string))
	return pid, err
}

// BackendPID answers the backend's process id (BackendPIDSQL).
func BackendPID(ctx context.Context, q db.DBTX) (pid int32, err error) {
	err = q.QueryRow(ctx, BackendPIDSQL).Scan(&pid)
	return pid, err
}

// ReadSession answers the backend's process id and the session's
// tokend.session_check, "" when unset (SessionReadSQL).
func ReadSession(ctx context.Context, q db.DBTX) (pid int32, mark string, err error) {
	err = q.QueryRow(ctx, SessionReadSQL).Scan(&pid, &mark)
	return pid, mark, err
}
