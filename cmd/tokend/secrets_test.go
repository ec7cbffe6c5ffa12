package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/testkit/pgtest"
)

// TestSecretsFromFiles: each secret variable may come from NAME_FILE or
// from a systemd credential called NAME; the variable itself wins over the
// credential, both NAME and NAME_FILE is refused, and a file that cannot
// be read, or is empty, is refused with the variable and the path named.
func TestSecretsFromFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := strings.Repeat("k", 40)
	keyFile := write("key", key+"\n")
	creds := filepath.Join(dir, "creds")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "TOKEND_SECRET_KEY"), []byte("from-credential\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    string // TOKEND_SECRET_KEY as read
		wantErr string
	}{
		{"variable", map[string]string{"TOKEND_SECRET_KEY": key}, key, ""},
		{"file", map[string]string{"TOKEND_SECRET_KEY_FILE": keyFile}, key, ""},
		{"credential", map[string]string{"CREDENTIALS_DIRECTORY": creds}, "from-credential", ""},
		{"file over credential", map[string]string{"TOKEND_SECRET_KEY_FILE": keyFile, "CREDENTIALS_DIRECTORY": creds}, key, ""},
		{"variable over credential", map[string]string{"TOKEND_SECRET_KEY": "set", "CREDENTIALS_DIRECTORY": creds}, "set", ""},
		{"no credential of that name", map[string]string{"CREDENTIALS_DIRECTORY": dir}, "", ""},
		{"both", map[string]string{"TOKEND_SECRET_KEY": key, "TOKEND_SECRET_KEY_FILE": keyFile}, "", "TOKEND_SECRET_KEY and TOKEND_SECRET_KEY_FILE are both set"},
		{"missing file", map[string]string{"TOKEND_SECRET_KEY_FILE": filepath.Join(dir, "nope")}, "", "TOKEND_SECRET_KEY (TOKEND_SECRET_KEY_FILE): open " + filepath.Join(dir, "nope")},
		{"empty file", map[string]string{"TOKEND_SECRET_KEY_FILE": write("empty", "\n")}, "", "is empty"},
		{"too large", map[string]string{"TOKEND_SECRET_KEY_FILE": write("big", strings.Repeat("x", maxSecretFile+1))}, "", "is over 64 KiB"},
	}
	for _, tt := range tests {
		getenv, err := secretsFromFiles(func(k string) string { return tt.env[k] })
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case getenv("TOKEND_SECRET_KEY") != tt.want:
			t.Errorf("%s: TOKEND_SECRET_KEY %q, want %q", tt.name, getenv("TOKEND_SECRET_KEY"), tt.want)
		}
	}
}

// TestCommandsReadSecretFiles: tokend migrate and keys create reach the
// database through TOKEND_DATABASE_URL_FILE, and a bad file stops them with
// exit status 2 and one line naming it.
func TestCommandsReadSecretFiles(t *testing.T) {
	t.Parallel()
	urlFile := filepath.Join(t.TempDir(), "database-url")
	if err := os.WriteFile(urlFile, []byte(pgtest.NewEmptyURL(t)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOKEND_DATABASE_URL_FILE": urlFile}
	for _, args := range [][]string{{"migrate"}, {"keys", "create", "--tenant", "acme", "--role", "client"}} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
	}
	env["TOKEND_DATABASE_URL_FILE"] += ".missing"
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"migrate"}, func(k string) string { return env[k] }, &bytes.Buffer{}, &stderr); code != 2 ||
		!strings.HasPrefix(stderr.String(), "tokend: TOKEND_DATABASE_URL (TOKEND_DATABASE_URL_FILE): open ") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("a missing file: exit %d, %q; want 2 and one line naming it", code, stderr.String())
	}
}
