package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tokend/tokend/migrations"
)

func migrate(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	var cfg dbConfig
	if err := parseFlags("migrate", args, getenv, stderr, cfg.bind); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if err := migrations.ApplyURL(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "tokend: schema is up to date")
	return nil
}
