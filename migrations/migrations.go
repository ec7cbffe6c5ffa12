// Package migrations holds tokend's schema as versioned SQL files embedded in
// the binary, applied with tern.
package migrations

import (
	"context"
	"embed"
	"fmt"

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
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return fmt.Errorf("migrations: load: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrations: apply: %w", err)
	}
	return nil
}

// ApplyURL connects to url, applies the migrations and disconnects.
func ApplyURL(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close(ctx)
	return Apply(ctx, conn)
}
