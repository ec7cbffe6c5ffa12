package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

// TestVersion checks that tokend version prints the build's version: the
// one set at link time, and the Go toolchain's.
func TestVersion(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	version = "v9.8.7"
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"version"}, func(string) string { return "" }, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("tokend version: exit %d, stderr %s", code, stderr.String())
	}
	line := stdout.String()
	if !strings.HasPrefix(line, "tokend v9.8.7 (") || !strings.Contains(line, runtime.Version()) || strings.Count(line, "\n") != 1 {
		t.Errorf("tokend version = %q, want tokend v9.8.7 (…, %s)", line, runtime.Version())
	}
}
