package proctest

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// errorsTB is a testing.TB that keeps what Errorf is told.
type errorsTB struct {
	testing.TB
	errors []string
}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errors = append(e.errors, fmt.Sprintf(format, args...))
}

// TestRaceReportFailsTheTest: a tokend process whose logs hold a race
// detector's report fails the test that ran it, and the failure carries the
// logs; logs without one do not.
func TestRaceReportFailsTheTest(t *testing.T) {
	report := "==================\nWARNING: DATA RACE\nWrite at 0x00c000123 by goroutine 7:\n"
	for _, c := range []struct {
		logs string
		want bool
	}{{"listening on 127.0.0.1:1234\n" + report, true}, {"listening on 127.0.0.1:1234\n", false}} {
		tb := &errorsTB{TB: t}
		s := &Server{t: tb, addr: "127.0.0.1:1234", logs: bytes.NewBufferString(c.logs)}
		if got := s.raced(); got != c.want || (len(tb.errors) == 1) != c.want {
			t.Errorf("logs %q: raced = %v with errors %q, want %v", c.logs, got, tb.errors, c.want)
		}
		if c.want && len(tb.errors) == 1 && !strings.Contains(tb.errors[0], "Write at 0x00c000123") {
			t.Errorf("the failure does not carry the logs: %q", tb.errors[0])
		}
	}
}

// TestBuildFlagsKeepTheTestBinarysOwn: a command built for a test has the
// test binary's -race and tags, so the build reuses its compiled packages;
// scripts/test's GOFLAGS tag (nomsgpack) is among them.
func TestBuildFlagsKeepTheTestBinarysOwn(t *testing.T) {
	if strings.Contains(os.Getenv("GOFLAGS"), "nomsgpack") && !slices.Contains(ownTags, "nomsgpack") {
		t.Errorf("GOFLAGS=%q, but the builds for tests would not keep nomsgpack (ownTags %q)", os.Getenv("GOFLAGS"), ownTags)
	}
	for _, extra := range []string{"", "tokend_faketime", "a,b"} {
		flags := strings.Join(BuildFlags(extra), " ")
		if got := strings.Contains(flags, "-race"); got != raceBuild {
			t.Errorf("BuildFlags(%q) = %q: -race %v, the test binary's %v", extra, flags, got, raceBuild)
		}
		for _, tag := range append(slices.Clone(ownTags), strings.Split(extra, ",")...) {
			if tag != "" && !strings.Contains(flags, tag) {
				t.Errorf("BuildFlags(%q) = %q: no tag %s", extra, flags, tag)
			}
		}
	}
}
