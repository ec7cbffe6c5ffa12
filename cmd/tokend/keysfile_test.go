package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPreviousKeysFileOneKeyPerLine: a TOKEND_PREVIOUS_SECRET_KEYS_FILE
// with one key per line is as many keys (it was one key holding the line
// breaks, silently wrong), commas still separate keys, and a bad key is
// refused naming the file and the key's place, never the key.
func TestPreviousKeysFileOneKeyPerLine(t *testing.T) {
	k1, k2, k3 := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	dir := t.TempDir()
	read := func(content string) serveConfig {
		t.Helper()
		path := filepath.Join(dir, "previous")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"TOKEND_SECRET_KEY": strings.Repeat("s", 40), "TOKEND_PREVIOUS_SECRET_KEYS_FILE": path}
		getenv, err := secretsFromFiles(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		var c serveConfig
		c.readKeys(getenv)
		return c
	}
	for _, content := range []string{k1 + "\n" + k2 + "\n" + k3 + "\n", k1 + "\r\n" + k2 + "\r\n\r\n" + k3, k1 + "," + k2 + "\n" + k3} {
		c := read(content)
		if !slices.Equal(c.PreviousSecretKeys, []string{k1, k2, k3}) {
			t.Errorf("%q: %d keys; want the 3", content, len(c.PreviousSecretKeys))
		}
	}
	serve := func(content string) string {
		t.Helper()
		read(content) // writes the file
		env := map[string]string{"TOKEND_DATABASE_URL": "postgres://h/db", "TOKEND_SECRET_KEY": strings.Repeat("s", 40),
			"TOKEND_PREVIOUS_SECRET_KEYS_FILE": filepath.Join(dir, "previous")}
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", content, code)
		}
		return stderr.String()
	}
	if msg := serve(k1 + "\nshort-secret-key\n"); !strings.Contains(msg, filepath.Join(dir, "previous")) || !strings.Contains(msg, "key 2") || strings.Contains(msg, "short-secret") {
		t.Errorf("a short key on line 2: %q; want an error naming the file and key 2, not the key", msg)
	}
	if msg := serve(k1 + "\x00" + k2); !strings.Contains(msg, "control character") || strings.Contains(msg, k1) {
		t.Errorf("a key with a NUL: %q; want refused without the key", msg)
	}
}
