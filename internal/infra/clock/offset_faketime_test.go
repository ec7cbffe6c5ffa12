//go:build tokend_faketime

package clock

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseOffset(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"15s", 15 * time.Second, true},
		{"+15s", 15 * time.Second, true},
		{"-15s", -15 * time.Second, true},
		{"1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"0", 0, true},
		{"15", 0, false}, // a unit is required
		{"soon", 0, false},
	} {
		got, err := parseOffset(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseOffset(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// The offset comes from the environment the process starts with: the test
// binary runs itself with TOKEND_FAKETIME_OFFSET set, and a malformed value
// stops it.
func TestOffsetFromEnvironment(t *testing.T) {
	if os.Getenv("CLOCK_TEST_CHILD") == "1" {
		fmt.Printf("offset=%v\n", Offset())
		os.Exit(0)
	}
	run := func(value string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOffsetFromEnvironment$")
		cmd.Env = append(os.Environ(), "CLOCK_TEST_CHILD=1", OffsetEnv+"="+value)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for value, want := range map[string]string{"15s": "offset=15s", "-15s": "offset=-15s"} {
		out, err := run(value)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("%s=%s: %v\n%s, want %q", OffsetEnv, value, err, out, want)
		}
	}
	if out, err := run("fifteen"); err == nil || !strings.Contains(out, OffsetEnv) {
		t.Errorf("%s=fifteen: %v\n%s, want the process stopped naming %s", OffsetEnv, err, out, OffsetEnv)
	}
}
