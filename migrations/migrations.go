// Package migrations holds tokend's schema as versioned SQL files embedded in
// the binary, applied with tern.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// VersionTable is where the applied schema version is recorded.
const VersionTable = "tokend_schema_version"

// Apply brings the database behind conn to the newest schema version. tern
// holds an advisory lock while migrating, so several tokend processes starting
// together apply each migration once.
func Apply(ctx context.Context, conn *pgx.Conn) error {
	_, err := ApplyCount(ctx, conn)
	return err
}

// ApplyCount is Apply, and says how many migrations it applied: zero when
// the schema was already at the newest version, or another process brought
// it there first.
func ApplyCount(ctx context.Context, conn *pgx.Conn) (applied int, err error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return 0, fmt.Errorf("migrations: load: %w", err)
	}
	// Counted as tern starts each one, under its lock: a migration another
	// process applied first is not counted here.
	m.OnStart = func(int32, string, string, string) { applied++ }
	if err := m.Migrate(ctx); err != nil {
		return applied, fmt.Errorf("migrations: apply: %w", err)
	}
	return applied, nil
}

// ApplyURL connects to url, applies the migrations and disconnects.
func ApplyURL(ctx context.Context, url string) error {
	_, err := ApplyURLCount(ctx, url)
	return err
}

// ApplyURLCount is ApplyURL, and says how many migrations it applied, as
// ApplyCount does.
func ApplyURLCount(ctx context.Context, url string) (applied int, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(ctx)
	return ApplyCount(ctx, conn)
}

// Checksum is a hex SHA-256 over the names and contents of the embedded
// migration files: two binaries with the same Checksum build the same schema.
func Checksum() (string, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return "", fmt.Errorf("migrations: %w", err)
	}
	h := sha256.New()
	for _, e := range entries { // ReadDir sorts by name
		b, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return "", fmt.Errorf("migrations: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
