package ledger

import (
	"embed"
	"io/fs"

	"github.com/tokend/tokend/migrations"
)

//go:embed migrations/*.sql
var files embed.FS

// Migrations is the ledger's own migration set, with its own version table.
// Apply it after tokend's (migrations.Schema), whose first migration
// created these tables before they were the ledger's.
var Migrations = migrations.Set{Files: sub(files, "migrations"), VersionTable: "tokend_ledger_schema_version"}

func sub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // dir is a constant that go:embed has checked
	}
	return s
}
