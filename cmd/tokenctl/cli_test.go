package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// refusingServer answers every request 401 unauthorized, as tokend does for
// an unknown key, and records the paths it was asked for.
func refusingServer(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var (
		mu    sync.Mutex
		paths []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"type":"about:blank","title":"Unauthorized","status":401,"code":"unauthorized","detail":"unknown API key"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &paths
}

// TestGlobalFlagsBeforeTheCommand: --url, --key and --json are taken before
// the command (and before a group's subcommand) as after it.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	srv, paths := refusingServer(t)
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		{"--url", srv.URL, "--key", "k", "stats"},
		{"--url=" + srv.URL, "--key=k", "--json", "stats"},
		{"--key", "k", "stats", "--url", srv.URL},
		{"--url", srv.URL, "--key", "k", "webhooks", "list"},
		{"--url", srv.URL, "--key", "k", "--json", "operations", "get", "ledger.credit"},
	} {
		var stdout, stderr bytes.Buffer
		before := len(*paths)
		code := run(context.Background(), args, noEnv, &stdout, &stderr)
		if code != exitAuth || len(*paths) != before+1 {
			t.Errorf("tokenctl %s: exit %d after %d requests, stderr %q; want exit %d (the server's 401) after one request",
				strings.Join(args, " "), code, len(*paths)-before, stderr.String(), exitAuth)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--bogus", "stats"}, noEnv, &stdout, &stderr); code != exitUsage {
		t.Errorf("an unknown flag before the command: exit %d, want %d", code, exitUsage)
	}
}

// TestHelpOfEveryGroupExitsZero: a group's --help prints its subcommands on
// stdout and exits 0, as the top level's does.
func TestHelpOfEveryGroupExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"-h"},
		{"webhooks", "--help"}, {"webhooks", "help"}, {"operations", "-h"}, {"events", "--help"},
		{"webhooks", "rotate-secret", "--help"}, {"stats", "--help"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr)
		if code != exitOK {
			t.Errorf("tokenctl %s: exit %d, want 0; stderr %q", strings.Join(args, " "), code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"webhooks", "--help"}, func(string) string { return "" }, &stdout, &stderr)
	for _, want := range []string{"rotate-secret", "--delivered", "--position"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("webhooks --help does not mention %s:\n%s", want, stdout.String())
		}
	}
	stdout.Reset()
	run(context.Background(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr)
	for _, want := range []string{"rotate-secret", "--delivered", "--position", "events tail"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("tokenctl --help does not mention %s", want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSaysItIsRetrying: with nothing listening, tokenctl says why and that
// it is retrying after its first attempt, before the first backoff wait,
// instead of staying silent through its 15 s of retries.
func TestSaysItIsRetrying(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--url", "http://" + addr, "--key", "k", "stats"}, func(string) string { return "" }, &stdout, &stderr)
	}()
	deadline := time.After(10 * time.Second) // a hang bound, not a speed target
	for !strings.Contains(stderr.String(), "retrying") {
		select {
		case code := <-done:
			t.Fatalf("tokenctl ended (exit %d) without saying it retries; stderr %q", code, stderr.String())
		case <-deadline:
			t.Fatalf("no word of retrying on stderr after 10 s: %q", stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := stderr.String(); !strings.Contains(got, "connection refused") || strings.Count(got, "retrying") != 1 {
		t.Errorf("stderr %q: want one line naming the refused connection", got)
	}
	cancel()
	if code := <-done; code == exitOK {
		t.Errorf("interrupted while tokend is down: exit 0")
	}
}
