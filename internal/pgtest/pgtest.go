// Package pgtest hands each test a fresh, migrated Postgres database, so tests
// and packages run in parallel without seeing each other's rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/migrations"
)

// DefaultAdminURL is used when TOKEND_TEST_DATABASE_URL is unset; it matches a
// local server with trust auth, the set-up scripts/test provides.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if u := os.Getenv("TOKEND_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// NewURL creates a migrated database for t, dropped when t ends, and returns
// its connection URL.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("pgtest: connect to %s (set TOKEND_TEST_DATABASE_URL, or run scripts/test): %v", redact(AdminURL()), err)
	}
	defer admin.Close(ctx)

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "tokend_test_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})

	u, err := url.Parse(AdminURL())
	if err != nil {
		t.Fatalf("pgtest: admin url: %v", err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	if err := migrations.ApplyURL(ctx, dbURL); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dbURL
}

// NewPool creates a migrated database for t and returns a pool on it, closed
// when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}
