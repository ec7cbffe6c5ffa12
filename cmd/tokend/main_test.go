package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// tokend runs the binary with only the given environment and returns its
// outputs and exit status.
func tokend(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(proctest.Binary(t), args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("tokend %v: %v", args, err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

var keyLineRE = regexp.MustCompile(`^tkd_[A-Za-z0-9_-]{43}\n$`)

func TestKeys(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	env := []string{"TOKEND_DATABASE_URL=" + dbURL}
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })

	stdout, stderr, code := tokend(t, env, "keys", "create", "--tenant", "acme", "--role", "operator")
	if code != 0 || !keyLineRE.MatchString(stdout) {
		t.Fatalf("keys create: exit %d, stdout %q, stderr %s; want exit 0 and one key line", code, stdout, stderr)
	}
	k, err := apikey.Resolve(t.Context(), conn, strings.TrimSuffix(stdout, "\n"))
	if err != nil || k.Tenant != "acme" || k.Role != apikey.Operator {
		t.Fatalf("the printed key resolves to %+v, %v; want an acme operator key", k, err)
	}
	if strings.Contains(stderr, strings.TrimSpace(stdout)) {
		t.Errorf("the key is also on stderr: %s", stderr)
	}

	// A flag overrides the environment.
	stdout, _, code = tokend(t, []string{"TOKEND_DATABASE_URL=postgres://nobody@127.0.0.1:1/none"}, "keys", "create", "--tenant", "acme", "--role", "client", "--database-url", dbURL)
	if code != 0 || !keyLineRE.MatchString(stdout) {
		t.Fatalf("keys create --database-url: exit %d, stdout %q", code, stdout)
	}

	stdout, stderr, code = tokend(t, env, "keys", "revoke", "--tenant", "acme", "--id", k.ID)
	if code != 0 || stdout != "" {
		t.Fatalf("keys revoke: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	var revoked bool
	if err := conn.QueryRow(t.Context(), `SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1`, k.ID).Scan(&revoked); err != nil || !revoked {
		t.Errorf("key %s revoked = %v, %v; want true", k.ID, revoked, err)
	}
	if _, stderr, code = tokend(t, env, "keys", "revoke", "--tenant", "other", "--id", k.ID); code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("revoking another tenant's key: exit %d, stderr %s; want 1, not found", code, stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	const (
		db  = "TOKEND_DATABASE_URL=postgres://postgres@127.0.0.1:1/none"
		key = "TOKEND_SECRET_KEY=0123456789abcdef0123456789abcdef"
	)
	tests := []struct {
		name string
		env  []string
		args []string
		want string // in stderr
	}{
		{"no command", nil, nil, "usage"},
		{"unknown command", nil, []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{db}, []string{"migrate", "--nope"}, "nope"},
		{"stray argument", []string{db}, []string{"migrate", "now"}, `"now"`},
		{"migrate without database", nil, []string{"migrate"}, "TOKEND_DATABASE_URL"},
		{"bad database url", []string{"TOKEND_DATABASE_URL=postgres://x:secretpw@host:notaport/db"}, []string{"migrate"}, "TOKEND_DATABASE_URL"},
		{"keys without subcommand", []string{db}, []string{"keys"}, "create or revoke"},
		{"keys create without tenant", []string{db}, []string{"keys", "create", "--role", "client"}, "--tenant"},
		{"keys create with bad tenant", []string{db}, []string{"keys", "create", "--tenant", "Acme", "--role", "client"}, "--tenant"},
		{"keys create with bad role", []string{db}, []string{"keys", "create", "--tenant", "acme", "--role", "admin"}, "--role"},
		{"keys revoke with bad id", []string{db}, []string{"keys", "revoke", "--tenant", "acme", "--id", "tok_1"}, "--id"},
		{"serve without secret key", []string{db}, []string{"serve"}, "TOKEND_SECRET_KEY is required"},
		{"serve with short secret key", []string{db, "TOKEND_SECRET_KEY=short"}, []string{"serve"}, "TOKEND_SECRET_KEY is 5 bytes"},
		{"serve with short previous key", []string{db, key, "TOKEND_PREVIOUS_SECRET_KEYS=0123456789abcdef0123456789abcdefXX, short"}, []string{"serve"}, "key 2 is 5 bytes"},
		{"serve with bad listen", []string{db, key, "TOKEND_LISTEN=8080"}, []string{"serve"}, "TOKEND_LISTEN"},
		{"serve with bad listen flag", []string{db, key}, []string{"serve", "--listen", "localhost:http"}, "TOKEND_LISTEN"},
		{"serve with bad redis url", []string{db, key, "TOKEND_REDIS_URL=http://cache:6379"}, []string{"serve"}, "TOKEND_REDIS_URL"},
		{"serve with bad shutdown timeout", []string{db, key, "TOKEND_SHUTDOWN_TIMEOUT=soon"}, []string{"serve"}, "TOKEND_SHUTDOWN_TIMEOUT"},
		{"serve with zero shutdown timeout", []string{db, key}, []string{"serve", "--shutdown-timeout", "0s"}, "TOKEND_SHUTDOWN_TIMEOUT"},
		{"serve with bad sweep interval", []string{db, key, "TOKEND_SWEEP_INTERVAL=often"}, []string{"serve"}, "TOKEND_SWEEP_INTERVAL"},
		{"serve with zero sweep interval", []string{db, key}, []string{"serve", "--sweep-interval", "0s"}, "TOKEND_SWEEP_INTERVAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := tokend(t, tt.env, tt.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr mentioning %q", code, stdout, stderr, tt.want)
			}
			for _, secret := range []string{"secretpw", "0123456789abcdef"} {
				if strings.Contains(stderr, secret) {
					t.Errorf("stderr quotes a secret: %s", stderr)
				}
			}
		})
	}
}

func TestServe(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, key, err := apikey.Create(t.Context(), conn, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(proctest.Binary(t), "serve", "--listen", "127.0.0.1:0")
	cmd.Env = []string{
		"TOKEND_DATABASE_URL=" + dbURL,
		"TOKEND_SECRET_KEY=" + strings.Repeat("k", 40),
		"TOKEND_PREVIOUS_SECRET_KEYS=" + strings.Repeat("p", 40),
		"TOKEND_ALLOW_SUPERUSER=1",
	}
	srv := startServe(t, cmd)
	base := srv.base

	if res, body := httpDo(t, "GET", base+"/healthz", "", nil); res.StatusCode != http.StatusOK || body != `{"status":"ok"}` {
		t.Errorf("healthz = %d %s", res.StatusCode, body)
	}
	if res, body := httpDo(t, "GET", base+"/readyz", "", nil); res.StatusCode != http.StatusOK {
		t.Errorf("readyz = %d %s", res.StatusCode, body)
	}
	// The wiring is complete: a built-in handler spends a token.
	res, body := httpDo(t, "POST", base+"/v1/tokens", `{"operation":"ledger.credit","subject":"u","ttl_seconds":60}`,
		http.Header{"Authorization": {"Bearer " + key}, "Idempotency-Key": {"i-1"}})
	var issued struct{ Token string }
	if err := json.Unmarshal([]byte(body), &issued); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("issue = %d %s", res.StatusCode, body)
	}
	res, body = httpDo(t, "POST", base+"/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"u","payload":{"account":"a","amount":3}}`, issued.Token),
		http.Header{"Authorization": {"Bearer " + key}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"balance":3`) {
		t.Errorf("consume = %d %s", res.StatusCode, body)
	}

	logs, err := srv.stop()
	if err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs)
	}
	if !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("no clean stop in the log:\n%s", logs)
	}
	if strings.Contains(logs, key) || strings.Contains(logs, issued.Token) {
		t.Errorf("the log holds a key or a token secret:\n%s", logs)
	}
}

func httpDo(t *testing.T, method, url, body string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}
