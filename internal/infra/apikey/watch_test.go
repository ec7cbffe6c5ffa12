package apikey_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// watching is a running apikey.Watch and what it told.
type watching struct {
	heard  chan []byte
	resets chan struct{}
}

func watch(t *testing.T, pool *pgxpool.Pool) *watching {
	t.Helper()
	w := &watching{heard: make(chan []byte, 16), resets: make(chan struct{}, 16)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- apikey.Watch(ctx, pool, func(h []byte) { w.heard <- h }, func() { w.resets <- struct{}{} }, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v once its context ended, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Watch still running 10s after its context ended")
		}
	})
	w.reset(t) // listening
	return w
}

// reset waits for Watch to call reset.
func (w *watching) reset(t *testing.T) {
	t.Helper()
	select {
	case <-w.resets:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not (re)start listening within 10s")
	}
}

// next waits for the next hash Watch tells of.
func (w *watching) next(t *testing.T) []byte {
	t.Helper()
	select {
	case h := <-w.heard:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("no revocation heard within 10s")
		return nil
	}
}

func keyHash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// Watch hears of committed revocations only, when they commit. Notifications
// arrive in commit order, so the order of what is heard is the evidence, and
// no test waits for something not to happen.
func TestWatchHearsCommittedRevocations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	w := watch(t, pool)
	var (
		ids     = map[string]string{}
		secrets = map[string]string{}
	)
	for _, name := range []string{"rolled back", "in a long tx", "meanwhile", "last"} {
		k, secret, err := apikey.Create(ctx, pool, "acme", apikey.Client)
		if err != nil {
			t.Fatal(err)
		}
		ids[name], secrets[name] = k.ID, secret
	}

	// A revocation rolled back is never told.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, tx, "acme", ids["rolled back"]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A revocation is told when its transaction commits, not when its
	// statement runs: "meanwhile", committed in between, is heard first.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := apikey.Revoke(ctx, tx, "acme", ids["in a long tx"]); err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", ids["meanwhile"]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", ids["last"]); err != nil {
		t.Fatal(err)
	}

	for _, want := range []string{"meanwhile", "in a long tx", "last"} {
		if got := w.next(t); !bytes.Equal(got, keyHash(secrets[want])) {
			t.Fatalf("heard %x, want the hash of the key revoked %q %x (the rolled-back one is %x)",
				got, want, keyHash(secrets[want]), keyHash(secrets["rolled back"]))
		}
	}
	if _, err := apikey.Resolve(ctx, pool, secrets["rolled back"]); err != nil {
		t.Errorf("the key whose revocation rolled back: Resolve = %v, want it live", err)
	}
}

// After losing its connection Watch listens again and calls reset, since what
// was revoked meanwhile is not told; a payload that names no key resets too.
func TestWatchResets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	w := watch(t, pool)

	var killed int
	err := pool.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listening connections (%v), want 1", killed, err)
	}
	w.reset(t)
	k, secret, err := apikey.Create(ctx, pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.next(t); !bytes.Equal(got, keyHash(secret)) {
		t.Fatalf("after reconnecting, heard %x, want %x", got, keyHash(secret))
	}

	if _, err := pool.Exec(ctx, `SELECT pg_notify('tokend_api_key_revoked', 'not a key hash')`); err != nil {
		t.Fatal(err)
	}
	w.reset(t)
	select {
	case h := <-w.heard:
		t.Errorf("a payload that names no key was told as the hash %x", h)
	default:
	}
}

func TestLive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	live, _, err := apikey.Create(ctx, pool, "acme", apikey.Operator)
	if err != nil {
		t.Fatal(err)
	}
	revoked, _, err := apikey.Create(ctx, pool, "acme", apikey.Operator)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apikey.Revoke(ctx, pool, "acme", revoked.ID); err != nil {
		t.Fatal(err)
	}
	other, _, err := apikey.Create(ctx, pool, "globex", apikey.Operator)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tenant, id string
		want             error
	}{
		{"live", "acme", live.ID, nil},
		{"revoked", "acme", revoked.ID, apikey.ErrUnauthorized},
		{"another tenant's key", "acme", other.ID, apikey.ErrUnauthorized},
		{"own key under another tenant", "globex", live.ID, apikey.ErrUnauthorized},
		{"unknown", "acme", "key_missing", apikey.ErrUnauthorized},
		{"no id", "acme", "", apikey.ErrUnauthorized},
	}
	for _, tt := range tests {
		if err := apikey.Live(ctx, pool, tt.tenant, tt.id); !errors.Is(err, tt.want) {
			t.Errorf("%s: Live = %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestWatchFallsBackToPolling: when Watch's own notification is not heard
// (LISTEN through a transaction-pooling proxy), it keeps dropping every
// cached resolution at an interval instead, so revocations still arrive.
func TestWatchFallsBackToPolling(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resets := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- apikey.WatchDeaf(ctx, pool, func() { resets <- struct{}{} }, 50*time.Millisecond, 20*time.Millisecond)
	}()
	// One reset on listening, then the polling ones.
	for i := range 5 {
		select {
		case <-resets:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d resets, then none: no fallback to polling", i)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v, want context.Canceled", err)
	}
}
