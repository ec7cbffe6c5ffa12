package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/token"
)

// bin is the tokenctl binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokenctl-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "tokenctl")
	// With the test binary's flags (-race, its tags): a plain build compiled
	// the standard library again, without -race, for this one binary.
	build := exec.Command("go", append(append([]string{"build"}, proctest.BuildFlags("")...), "-o", bin, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tokenctl:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture is a running tokend on a fresh database, with a client and an
// operator key of tenant acme.
type fixture struct {
	t        *testing.T
	dbURL    string
	srv      *proctest.Server
	db       *pgx.Conn
	client   string
	operator string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dbURL := ledgertest.NewURL(t)
	f := &fixture{
		t:        t,
		dbURL:    dbURL,
		srv:      proctest.Start(t, proctest.Options{DatabaseURL: dbURL}),
		client:   proctest.CreateKey(t, dbURL, "acme", "client"),
		operator: proctest.CreateKey(t, dbURL, "acme", "operator"),
	}
	db, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	f.db = db
	return f
}

// result is what one run of tokenctl did.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// ctl runs tokenctl in-process against f's server with acme's operator key
// in its environment.
func (f *fixture) ctl(args ...string) result {
	f.t.Helper()
	env := map[string]string{"TOKENCTL_URL": f.srv.URL, "TOKENCTL_KEY": f.operator}
	var stdout, stderr bytes.Buffer
	code := run(f.t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// ok runs ctl and fails the test unless it succeeds.
func (f *fixture) ok(args ...string) result {
	f.t.Helper()
	r := f.ctl(args...)
	if r.code != exitOK {
		f.t.Fatalf("tokenctl %s: %v", strings.Join(args, " "), r)
	}
	return r
}

// okJSON runs ctl with --json and decodes its output into v, strictly: the
// output is the API's answer, and v names all of it.
func (f *fixture) okJSON(v any, args ...string) result {
	f.t.Helper()
	r := f.ok(append(args, "--json")...)
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.t.Fatalf("tokenctl %s: decode %s: %v", strings.Join(args, " "), r.stdout, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		f.t.Fatalf("tokenctl %s: more than one JSON value: %s", strings.Join(args, " "), r.stdout)
	}
	return r
}

// fails runs ctl and fails the test unless it exits with code, prints
// nothing on stdout, and says want on stderr.
func (f *fixture) fails(code int, want string, args ...string) {
	f.t.Helper()
	r := f.ctl(args...)
	if r.code != code || r.stdout != "" || !strings.Contains(r.stderr, want) {
		f.t.Errorf("tokenctl %s: %v\nwant exit %d, no stdout, stderr with %q", strings.Join(args, " "), r, code, want)
	}
}

// call sends a request to tokend with key and returns the answer's status and body.
func (f *fixture) call(key, method, path, body string, header ...string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.t.Context(), method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// issued is a token issued through the API.
type issued struct{ ID, Token string }

// issue issues a token with acme's client key and fails the test unless it
// gets one.
func (f *fixture) issue(intentID, body string) issued {
	f.t.Helper()
	status, b := f.call(f.client, http.MethodPost, "/v1/tokens", body, "Idempotency-Key", intentID)
	var tok issued
	if status != http.StatusCreated || json.Unmarshal(b, &tok) != nil {
		f.t.Fatalf("issue: %d %s", status, b)
	}
	return tok
}

// spend spends tok as a token of op, with no payload, and returns the answer.
func (f *fixture) spend(tok issued, op string) (int, []byte) {
	f.t.Helper()
	return f.call(f.client, http.MethodPost, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":%q,"subject":"alice"}`, tok.Token, op))
}

// credit issues a ledger.credit token for subject and, if spend, spends it.
func (f *fixture) credit(intentID, subject string, spend bool) issued {
	f.t.Helper()
	const payload = `{"account":"acc_1","amount":1}`
	tok := f.issue(intentID, fmt.Sprintf(`{"operation":"ledger.credit","subject":%q,"ttl_seconds":600,"payload":%s}`, subject, payload))
	if spend {
		status, b := f.call(f.client, http.MethodPost, "/v1/tokens/consume",
			fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":%q,"payload":%s}`, tok.Token, subject, payload))
		if status != http.StatusOK {
			f.t.Fatalf("consume: %d %s", status, b)
		}
	}
	return tok
}

// declareLease declares pay.card, a lease operation whose lapsed leases wait
// for an operator.
func (f *fixture) declareLease() {
	f.t.Helper()
	if status, b := f.call(f.operator, http.MethodPut, "/v1/admin/operations/pay.card", `{"mode":"lease","lease_seconds":600}`); status != http.StatusOK {
		f.t.Fatalf("declare pay.card: %d %s", status, b)
	}
}

// leased issues a pay.card token and spends it: it is pending under the
// returned generation. pay.card must be declared.
func (f *fixture) leased(intentID string) (issued, int64) {
	f.t.Helper()
	tok := f.issue(intentID, `{"operation":"pay.card","subject":"alice","ttl_seconds":600}`)
	status, b := f.spend(tok, "pay.card")
	var lease struct{ Generation int64 }
	if status != http.StatusAccepted || json.Unmarshal(b, &lease) != nil {
		f.t.Fatalf("lease spend: %d %s", status, b)
	}
	return tok, lease.Generation
}

// unknown issues a pay.card token whose holder reported its outcome unknown.
func (f *fixture) unknown(intentID string) issued {
	f.t.Helper()
	tok, gen := f.leased(intentID)
	if status, b := f.call(f.client, http.MethodPost, "/v1/tokens/"+tok.ID+"/unknown", fmt.Sprintf(`{"generation":%d}`, gen)); status != http.StatusOK {
		f.t.Fatalf("report unknown: %d %s", status, b)
	}
	return tok
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Exec(f.t.Context(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// state reads a token's state from the database, "purged" when it is gone.
func (f *fixture) state(id string) string {
	f.t.Helper()
	var s string
	if err := f.db.QueryRow(f.t.Context(), `SELECT coalesce((SELECT state FROM tokens WHERE id = $1), 'purged')`, id).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// closedURL is the URL of a port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// The real binary, its exit statuses, and where it writes what.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	revoked := f.credit("i-1", "alice", false)
	f.ok("revoke", revoked.ID, "--reason", "test")
	down := closedURL(t)

	env := func(url, key string) []string { return []string{"TOKENCTL_URL=" + url, "TOKENCTL_KEY=" + key} }
	good := env(f.srv.URL, f.operator)
	tests := []struct {
		name   string
		env    []string
		args   []string
		code   int
		stderr string // in stderr; empty: stderr is empty
	}{
		{"ok", good, []string{"stats"}, exitOK, ""},
		{"help", nil, []string{"help"}, exitOK, ""},
		{"flag help", nil, []string{"list", "-h"}, exitOK, "--state"},
		{"not found", good, []string{"inspect", token.NewID()}, exitNotFound, "tokenctl: token_not_found: no such token"},
		{"unknown operation", good, []string{"operations", "get", "never.declared"}, exitNotFound, "unknown_operation"},
		{"conflict", good, []string{"revoke", revoked.ID, "--reason", "again"}, exitConflict, "tokenctl: invalid_state: "},
		{"no command", good, nil, exitUsage, "no command"},
		{"unknown command", good, []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"missing argument", good, []string{"inspect"}, exitUsage, "missing <id>"},
		{"extra argument", good, []string{"stats", "now"}, exitUsage, `unexpected argument "now"`},
		{"unknown flag", good, []string{"list", "--nope"}, exitUsage, "-nope"},
		{"bad flag value", good, []string{"list", "--limit", "many"}, exitUsage, "-limit"},
		{"no key", []string{"TOKENCTL_URL=" + f.srv.URL}, []string{"stats"}, exitUsage, "TOKENCTL_KEY"},
		{"bad url", env("ftp://example.com", f.operator), []string{"stats"}, exitUsage, "TOKENCTL_URL"},
		{"client key", env(f.srv.URL, f.client), []string{"stats"}, exitAuth, "tokenctl: forbidden: "},
		{"unknown key", env(f.srv.URL, "tkk_unknown"), []string{"stats"}, exitAuth, "tokenctl: unauthorized: "},
		{"server down", env(down, f.operator), []string{"stats"}, exitError, "tokenctl: cannot reach tokend at " + down + ": nothing listens there (connection refused); is tokend running"},
		{"bad request", good, []string{"list", "--state", "gone"}, exitError, "tokenctl: invalid_request: "},
		{"flags override env", env(down, "tkk_unknown"), []string{"stats", "--url", f.srv.URL, "--key", f.operator}, exitOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin, tt.args...)
			cmd.Env = tt.env
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			code := 0
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			r := result{code, stdout.String(), stderr.String()}
			switch {
			case r.code != tt.code:
				t.Errorf("want exit %d; got %v", tt.code, r)
			case tt.stderr == "" && r.stderr != "", !strings.Contains(r.stderr, tt.stderr):
				t.Errorf("want stderr with %q; got %v", tt.stderr, r)
			case r.code != exitOK && r.stdout != "":
				t.Errorf("a failure printed on stdout: %v", r)
			case strings.Contains(r.stderr, f.operator) || strings.Contains(r.stderr, f.client):
				t.Errorf("stderr quotes an API key: %v", r)
			}
		})
	}
}
