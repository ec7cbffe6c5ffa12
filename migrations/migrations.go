// Package migrations holds tokend's schema as versioned SQL files embedded in
// the binary, applied with tern.
//
// A program that embeds tokend keeps its own tables in a Set of its own,
// applied after tokend's, as the example ledger does.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/tokend/tokend/db"
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

// Apply brings the database behind conn to s's newest version, and says
// how many migrations it applied: zero when the schema was already at the
// newest version, or another process brought it there first. tern holds an
// advisory lock while migrating, so several processes starting together
// apply each migration once.
func (s Set) Apply(ctx context.Context, conn *pgx.Conn) (applied int, err error) {
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
	if citus {
		statementByStatement(m)
	}
	// Counted as tern starts each one, under its lock: a migration another
	// process applied first is not counted here.
	m.OnStart = func(int32, string, string, string) { applied++ }
	if err := m.Migrate(ctx); err != nil {
		return applied, fmt.Errorf("migrations: %s: apply: %w", s.VersionTable, err)
	}
	return applied, nil
}

// statementByStatement makes m send each migration's statements one at a
// time, still in the migration's one transaction, instead of the file as
// one string: on Citus, DDL on a distributed table is forwarded to the
// workers with the string it came in, and a multi-command string fails
// there. A migration applied to a distributed schema must also keep to one
// subcommand per ALTER TABLE and one index per DROP INDEX, as Citus
// requires (migrations 001-011 run before 012 distributes, on local tables).
// A migration marked to run outside a transaction (tern's disable-tx line,
// for CREATE INDEX CONCURRENTLY) still does.
func statementByStatement(m *migrate.Migrator) {
	for _, mig := range m.Migrations {
		if mig.UpSQL == "" {
			continue
		}
		statements, name := split(mig.UpSQL), mig.Name
		mig.DisableFuncTx = disableTx.MatchString(mig.UpSQL)
		mig.UpSQL = ""
		mig.UpFunc = func(ctx context.Context, conn *pgx.Conn) error {
			for _, st := range statements {
				if _, err := conn.Exec(ctx, st); err != nil {
					return fmt.Errorf("%s: %w (in: %.200s)", name, err, st)
				}
			}
			return nil
		}
	}
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
