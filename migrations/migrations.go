// Package migrations holds tokend's schema as versioned SQL files embedded in
// the binary, applied with tern.
//
// A program that embeds tokend keeps its own tables in a Set of its own,
// applied after tokend's, as the example ledger does.
package migrations

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"

	"github.com/tokend/tokend/db"
	"github.com/tokend/tokend/internal/infra/store"
)

//go:embed *.sql
var files embed.FS

// VersionTable is where the applied version of tokend's schema is recorded.
const VersionTable = "tokend_schema_version"

// Schema is tokend's own migration set.
var Schema = Set{Files: files, VersionTable: VersionTable}

// Set is a migration set: SQL files named NNN_name.sql, applied in order,
// each once, with the applied version recorded in VersionTable.
type Set struct {
	Files        fs.FS
	VersionTable string
}

// Apply is ApplyWith with the default Options.
func (s Set) Apply(ctx context.Context, conn *pgx.Conn) (applied int, err error) {
	return s.ApplyWith(ctx, conn, Options{})
}

// Default values of Options.
const (
	// DefaultLockTimeout is Options.LockTimeout's default.
	DefaultLockTimeout = 2 * time.Second
	// DefaultWaitFor is Options.WaitFor's default.
	DefaultWaitFor = time.Minute
)

// Options says how Set.ApplyWith waits for the locks a migration needs
// while tokend serves.
type Options struct {
	// LockTimeout bounds each wait of a migration for a lock (its
	// transaction's lock_timeout): requests that queue behind a migration
	// waiting for a table wait no longer than this. Zero:
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// WaitFor bounds the whole apply: the wait for another process's
	// migration lock, and the retries of migrations whose lock wait ran
	// out or that deadlocked. Zero: DefaultWaitFor.
	WaitFor time.Duration
	// Logger gets a WARN line for each retry, naming what the migration
	// waited for. Nil: slog.Default().
	Logger *slog.Logger
}

// LockOrder is the order in which a migration takes the locks of the
// tables it names, before its first statement: the order in which
// tokend's transactions take them. A spend resolves its key and
// operation, locks the token, runs the ledger handler, then records the
// event (tokens, ledger_*, token_events); the feed locks or reads its
// head before it reads the events and writes their positions
// (event_feed_heads, token_events, event_positions); the dispatcher then
// works on the webhook tables. A migration that took token_events before
// tokens, as 014's statements do, deadlocked with spends holding tokens
// and waiting for token_events. Tables not listed come after these, by
// name.
var LockOrder = []string{
	"api_key_routes", "api_keys", "console_signouts", "operations",
	"tokens", "ledger_accounts", "ledger_entries",
	"event_feed_heads", "token_events", "event_positions",
	"webhook_endpoints", "webhook_deliveries", "webhook_attempts",
}

// ApplyWith brings the database behind conn to s's newest version, and
// says how many migrations it applied: zero when the schema was already at
// the newest version, or another process brought it there first. tern
// holds an advisory lock while migrating, so several processes starting
// together apply each migration once.
//
// Each migration runs in one transaction, all or nothing, with
// lock_timeout o.LockTimeout: on plain Postgres it first locks, ACCESS
// EXCLUSIVE and in LockOrder, every existing table the migration names,
// then runs. A migration whose lock wait ran out, or that deadlocked, is
// rolled back and retried with backoff until o.WaitFor has passed, each
// retry logged with the sessions that held the lock; after that ApplyWith
// fails with an error naming them.
func (s Set) ApplyWith(ctx context.Context, conn *pgx.Conn, o Options) (applied int, err error) {
	o.LockTimeout = cmp.Or(o.LockTimeout, DefaultLockTimeout)
	o.WaitFor = cmp.Or(o.WaitFor, DefaultWaitFor)
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := migrate.NewMigrator(ctx, conn, s.VersionTable)
	if err != nil {
		return 0, fmt.Errorf("migrations: %s: %w", s.VersionTable, err)
	}
	if err := m.LoadMigrations(s.Files); err != nil {
		return 0, fmt.Errorf("migrations: %s: load: %w", s.VersionTable, err)
	}
	var citus bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&citus); err != nil {
		return 0, fmt.Errorf("migrations: %s: %w", s.VersionTable, err)
	}
	wrap(m, citus, o.LockTimeout)
	// Counted as tern starts each one, under its lock: a migration another
	// process applied first is not counted here.
	var started int
	m.OnStart = func(int32, string, string, string) { started++ }
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout") }()
	deadline := time.Now().Add(o.WaitFor)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// tern waits for its advisory lock on the session's lock_timeout,
		// which it resets after each migration.
		if err := setLockTimeout(ctx, conn, max(time.Until(deadline), time.Millisecond), false); err != nil {
			return applied, fmt.Errorf("migrations: %s: %w", s.VersionTable, err)
		}
		started = 0
		err = m.Migrate(ctx)
		if err == nil {
			return applied + started, nil
		}
		applied += max(started-1, 0) // the last one started failed; those before it committed
		if !lockWait(err) {
			return applied, fmt.Errorf("migrations: %s: apply: %w", s.VersionTable, err)
		}
		waited := waitedFor(ctx, conn, err)
		if time.Until(deadline) < backoff {
			return applied, fmt.Errorf("migrations: %s: gave up after %s and %d tries: waited for %s: %w",
				s.VersionTable, o.WaitFor, attempt, waited, err)
		}
		wait := backoff/2 + rand.N(backoff/2)
		log.Warn("migration waits for a lock; rolled back, retrying", "set", s.VersionTable, "waited_for", waited,
			"attempt", attempt, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return applied, fmt.Errorf("migrations: %s: %w (waited for %s)", s.VersionTable, ctx.Err(), waited)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// lockWait reports whether err is a lock wait that ran out or a deadlock:
// the migration was rolled back and may be tried again.
func lockWait(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.DeadlockDetected)
}

// lockWaitError is a migration's statement that waited for a lock too
// long, or deadlocked.
type lockWaitError struct {
	migration string
	table     string // the table it was locking, "" for another statement
	statement string
	err       error
}

func (e *lockWaitError) Error() string {
	return fmt.Sprintf("%s: %v (in: %.120s)", e.migration, e.err, e.statement)
}

func (e *lockWaitError) Unwrap() error { return e.err }

// waitedFor describes what err waited for: the migration and table, the
// sessions holding that table's locks (or tern's advisory lock) now, and
// a deadlock's detail. It asks on conn, idle again after the rollback.
func waitedFor(ctx context.Context, conn *pgx.Conn, err error) string {
	var what string
	table := ""
	var lw *lockWaitError
	switch {
	case errors.As(err, &lw) && lw.table != "":
		what, table = fmt.Sprintf("ACCESS EXCLUSIVE lock on %s for %s", lw.table, lw.migration), lw.table
	case errors.As(err, &lw):
		what = fmt.Sprintf("a lock for %s's statement %.80q", lw.migration, lw.statement)
	default:
		what = "the migration lock or the version table (another process migrating, or a session left holding one)"
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected {
		return what + ": deadlock: " + pgErr.Detail
	}
	if lw != nil && table == "" {
		return what
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var held []string
	var qerr error
	if table != "" {
		var bs []store.Blocker
		bs, qerr = store.Blockers(qctx, conn, table)
		for _, h := range bs {
			held = append(held, fmt.Sprintf("pid %d, application_name %q, %s for %ds, holding %s, statement %q",
				h.PID, h.App, h.State, h.ForSeconds, h.Locks, h.Statement))
		}
	} else {
		var hs []store.LockHolder
		hs, qerr = store.LockHolders(qctx, conn)
		for _, h := range hs {
			held = append(held, fmt.Sprintf("pid %d, application_name %q, client %s, %s for %ds, holding %s",
				h.PID, h.App, h.Client, h.State, h.ForSeconds, h.Locks))
		}
	}
	switch {
	case qerr != nil:
		return what + " (could not ask who holds it: " + qerr.Error() + ")"
	case len(held) == 0:
		return what + ", held by none now"
	}
	return what + ", held by " + strings.Join(held, "; ")
}

// setLockTimeout sets lock_timeout for conn's session, or its transaction
// when local.
func setLockTimeout(ctx context.Context, conn *pgx.Conn, d time.Duration, local bool) error {
	scope := ""
	if local {
		scope = "LOCAL "
	}
	_, err := conn.Exec(ctx, "SET "+scope+"lock_timeout = "+strconv.FormatInt(max(d.Milliseconds(), 1), 10))
	return err
}

// wrap makes each of m's migrations run, in its transaction, with
// lock_timeout d, after locking the tables it names (lockTables), and on
// Citus statement by statement: DDL on a distributed table is forwarded to
// the workers with the string it came in, and a multi-command string fails
// there. A migration applied to a distributed schema must also keep to one
// subcommand per ALTER TABLE and one index per DROP INDEX, as Citus
// requires (migrations 001-011 run before 012 distributes, on local
// tables). On Citus no table is locked up front: LOCK on a distributed
// table would lock its shards on every worker; lock_timeout and the
// retries alone keep traffic moving there. A migration marked to run
// outside a transaction (tern's disable-tx line, for CREATE INDEX
// CONCURRENTLY) locks no table up front either, which is its point: it runs
// statement by statement with the session's lock_timeout, and must be
// written so that a rerun after a failure halfway completes it.
func wrap(m *migrate.Migrator, citus bool, d time.Duration) {
	for _, mig := range m.Migrations {
		if mig.UpSQL == "" {
			continue
		}
		sql, name := mig.UpSQL, mig.Name
		noTx := disableTx.MatchString(sql)
		mig.DisableFuncTx = noTx
		statements := []string{sql}
		if citus || noTx {
			statements = split(sql)
		}
		mig.UpSQL = ""
		mig.UpFunc = func(ctx context.Context, conn *pgx.Conn) error {
			if err := setLockTimeout(ctx, conn, d, !noTx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !citus && !noTx {
				if err := lockTables(ctx, conn, name, sql); err != nil {
					return err
				}
			}
			for _, st := range statements {
				if _, err := conn.Exec(ctx, st); err != nil {
					if lockWait(err) {
						return &lockWaitError{migration: name, statement: st, err: err}
					}
					return fmt.Errorf("%s: %w (in: %.200s)", name, err, st)
				}
			}
			return nil
		}
	}
}

// lockTables locks, ACCESS EXCLUSIVE and in LockOrder, the existing tables
// whose names appear in sql outside its comments, one LOCK statement each
// so that a wait that runs out names its table. With every lock taken
// before the first statement, in the order requests take them, a
// migration never holds one table while it waits for another that a
// request holds while it waits for the first.
func lockTables(ctx context.Context, conn *pgx.Conn, name, sql string) error {
	tables, err := store.Tables(ctx, conn)
	if err != nil {
		return fmt.Errorf("%s: list tables: %w", name, err)
	}
	for _, t := range named(sql, tables) {
		if _, err := conn.Exec(ctx, "LOCK TABLE "+pgx.Identifier{t}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			if lockWait(err) {
				return &lockWaitError{migration: name, table: t, statement: "LOCK TABLE " + t, err: err}
			}
			return fmt.Errorf("%s: lock %s: %w", name, t, err)
		}
	}
	return nil
}

// named answers the tables of the list that sql names outside its
// comments, in LockOrder, then by name.
func named(sql string, tables []string) []string {
	words := map[string]bool{}
	for _, st := range split(sql) {
		for _, w := range identRE.FindAllString(stripComments(st), -1) {
			words[strings.ToLower(w)] = true
		}
	}
	rank := func(t string) int {
		if i := slices.Index(LockOrder, t); i >= 0 {
			return i
		}
		return len(LockOrder)
	}
	var out []string
	for _, t := range tables {
		if words[t] {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })
	return out
}

var identRE = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// stripComments drops -- comments from a statement (split keeps those
// inside one).
func stripComments(st string) string {
	var b strings.Builder
	for _, line := range strings.Split(st, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// disableTx is tern's line for a migration run outside a transaction.
var disableTx = regexp.MustCompile(`(?m)^---- tern: disable-tx ----$`)

// Checksum is a hex SHA-256 over the names and contents of s's files: two
// binaries with the same Checksum build the same schema.
func (s Set) Checksum() (string, error) {
	entries, err := fs.ReadDir(s.Files, ".")
	if err != nil {
		return "", fmt.Errorf("migrations: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", s.VersionTable)
	for _, e := range entries { // ReadDir sorts by name
		b, err := fs.ReadFile(s.Files, e.Name())
		if err != nil {
			return "", fmt.Errorf("migrations: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Apply brings the database behind conn to tokend's newest schema version.
func Apply(ctx context.Context, conn *pgx.Conn) error {
	_, err := Schema.Apply(ctx, conn)
	return err
}

// ApplyCount is Apply, and says how many migrations it applied, as
// Set.Apply does.
func ApplyCount(ctx context.Context, conn *pgx.Conn) (applied int, err error) {
	return Schema.Apply(ctx, conn)
}

// ApplyURL connects to url, applies tokend's migrations and disconnects.
func ApplyURL(ctx context.Context, url string) error {
	_, err := ApplyURLCount(ctx, url)
	return err
}

// ApplyURLCount is ApplyURL, and says how many migrations it applied, as
// Set.Apply does. The sets are applied in order, on one connection; none
// given means tokend's schema alone.
func ApplyURLCount(ctx context.Context, url string, sets ...Set) (applied int, err error) {
	cc, err := db.ConnConfig(url)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(ctx)
	if len(sets) == 0 {
		sets = []Set{Schema}
	}
	for _, s := range sets {
		n, err := s.Apply(ctx, conn)
		applied += n
		if err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// Checksum is tokend's schema's Set.Checksum.
func Checksum() (string, error) { return Schema.Checksum() }
