package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// migrate applies the schema migrations and says how many it applied, so
// that "nothing to do" is told from "done".
func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg dbConfig
	if err := parseFlags("migrate", args, getenv, stderr, cfg.bind); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	// A retry of a migration waiting for a lock is one line on stderr.
	n, err := cfg.applyMigrations(ctx, slog.New(slog.NewTextHandler(stderr, nil)))
	switch {
	case err != nil:
		return err
	case n == 0:
		fmt.Fprintln(stderr, "tokend: schema already up to date")
	case n == 1:
		fmt.Fprintln(stderr, "tokend: applied 1 migration; schema up to date")
	default:
		fmt.Fprintf(stderr, "tokend: applied %d migrations; schema up to date\n", n)
	}
	return nil
}
