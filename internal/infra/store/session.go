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

// lockHoldersSQL lists, oldest transaction first, the other sessions of
// the current database holding an advisory lock (tern's migration lock is
// one) or a lock on a table, with what pg_stat_activity says of them.
const lockHoldersSQL = `
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

// LockHolder is a session holding a lock (lockHoldersSQL).
type LockHolder struct {
	PID                int32
	App, Client, State string
	ForSeconds         int64
	Locks              string
}

// LockHolders reads the other sessions holding locks (lockHoldersSQL).
func LockHolders(ctx context.Context, q db.DBTX) ([]LockHolder, error) {
	rows, err := q.Query(ctx, lockHoldersSQL)
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
	// sessionMarkSQL sets tokend.session_check to $1 for the session.
	sessionMarkSQL = `SELECT pg_backend_pid(), set_config('tokend.session_check', $1, false)`
	// backendPIDSQL is the backend's process id.
	backendPIDSQL = `SELECT pg_backend_pid()`
	// sessionReadSQL reads tokend.session_check back, '' when unset.
	sessionReadSQL = `SELECT pg_backend_pid(), coalesce(current_setting('tokend.session_check', true), '')`
)

// MarkSession sets the session's tokend.session_check to mark
// (sessionMarkSQL) and answers the backend's process id.
func MarkSession(ctx context.Context, q db.DBTX, mark string) (pid int32, err error) {
	err = q.QueryRow(ctx, sessionMarkSQL, mark).Scan(&pid, new(string))
	return pid, err
}

// BackendPID answers the backend's process id (backendPIDSQL).
func BackendPID(ctx context.Context, q db.DBTX) (pid int32, err error) {
	err = q.QueryRow(ctx, backendPIDSQL).Scan(&pid)
	return pid, err
}

// ReadSession answers the backend's process id and the session's
// tokend.session_check, "" when unset (sessionReadSQL).
func ReadSession(ctx context.Context, q db.DBTX) (pid int32, mark string, err error) {
	err = q.QueryRow(ctx, sessionReadSQL).Scan(&pid, &mark)
	return pid, mark, err
}

// tablesSQL lists the tables of the current schema, for a migration runner
// that locks the ones a migration names before it runs (migrations.Set).
const tablesSQL = `
SELECT c.relname FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')`

// Tables answers the names of the current schema's tables (tablesSQL).
func Tables(ctx context.Context, q db.DBTX) ([]string, error) {
	rows, err := q.Query(ctx, tablesSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// blockersSQL lists, oldest transaction first, the other sessions holding
// a lock on table $1 (any mode: a migration's ACCESS EXCLUSIVE conflicts
// with all) or an advisory lock, with their statement, string literals
// replaced by '?' and cut to 120 characters, so that no secret a client
// wrote in a literal reaches a log.
const blockersSQL = `
SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(extract(epoch FROM now() - coalesce(a.xact_start, a.backend_start))::bigint, 0),
       string_agg(DISTINCT CASE WHEN l.locktype = 'advisory' THEN 'an advisory lock'
                                ELSE l.mode || ' on ' || l.relation::regclass::text END, ', '),
       left(regexp_replace(coalesce(a.query, ''), '''([^'']|'''')*''', '''?''', 'g'), 120)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid() AND a.datname = current_database()
  AND ((l.locktype = 'relation' AND l.relation = to_regclass($1)) OR ($1 = '' AND l.locktype = 'advisory'))
GROUP BY a.pid, a.application_name, a.state, a.xact_start, a.backend_start, a.query
ORDER BY coalesce(a.xact_start, a.backend_start)
LIMIT 3`

// Blocker is a session holding a lock another waits for (blockersSQL).
type Blocker struct {
	PID              int32
	App, State       string
	ForSeconds       int64
	Locks, Statement string
}

// Blockers reads the other sessions holding a lock on table, or an
// advisory lock when table is "" (blockersSQL).
func Blockers(ctx context.Context, q db.DBTX, table string) ([]Blocker, error) {
	rows, err := q.Query(ctx, blockersSQL, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Blocker, error) {
		var b Blocker
		err := r.Scan(&b.PID, &b.App, &b.State, &b.ForSeconds, &b.Locks, &b.Statement)
		return b, err
	})
}

// superuserSQL answers the role the session runs as, and whether it is a
// superuser.
const superuserSQL = `SELECT current_user::text, current_setting('is_superuser') = 'on'`

// Superuser answers the session's role and whether it is a superuser
// (superuserSQL).
func Superuser(ctx context.Context, q db.DBTX) (role string, super bool, err error) {
	err = q.QueryRow(ctx, superuserSQL).Scan(&role, &super)
	return role, super, err
}
