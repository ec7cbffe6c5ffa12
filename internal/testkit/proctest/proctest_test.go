package proctest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tokend/tokend/internal/testkit/pgtest"
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

// fatalTB is a testing.TB that keeps what Fatalf is told and ends the
// calling goroutine, as Fatalf does.
type fatalTB struct {
	testing.TB
	mu    sync.Mutex
	fatal []string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

// TestRestartRefusesAnotherProcessOnItsPort: a server restarted while
// another process holds its port fails the test, rather than taking the
// other's /healthz for its own and sending the test's requests there.
func TestRestartRefusesAnotherProcessOnItsPort(t *testing.T) {
	tb := &fatalTB{TB: t}
	s := Start(tb, Options{DatabaseURL: pgtest.NewURL(t)})
	s.Kill()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatalf("take the killed server's port: %v", err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})}
	go other.Serve(ln)
	defer other.Close()

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Restart()
	}()
	<-done
	if len(tb.fatal) != 1 || !strings.Contains(tb.fatal[0], "address already in use") {
		t.Errorf("Restart with %s held by another process failed with %q, want one failure saying the address is in use", s.addr, tb.fatal)
	}
	if pid := s.Pid(); pid != 0 {
		t.Errorf("the failed restart left process %d running", pid)
	}
}

func TestBoundAddrReadsServesListeningLine(t *testing.T) {
	for _, c := range []struct{ logs, want string }{
		{`{"time":"t","level":"INFO","msg":"migrations","applied":0}` + "\n" +
			`{"time":"t","level":"INFO","msg":"listening","addr":"127.0.0.1:40123","max_db_conns":8}` + "\n", "127.0.0.1:40123"},
		{`{"time":"t","level":"INFO","msg":"listening","addr":"127.0.0.1:401`, ""}, // not yet a whole line
		{`{"time":"t","level":"ERROR","msg":"serve","err":"listening: address already in use"}` + "\n", ""},
		{"", ""},
	} {
		if got := boundAddr(c.logs); got != c.want {
			t.Errorf("boundAddr(%q) = %q, want %q", c.logs, got, c.want)
		}
	}
}
