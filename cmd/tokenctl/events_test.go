package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/testkit/pgtest"
)

func TestEventsTail(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tok := f.credit("i-1", "alice", true)

	// Positions come once the writing transactions are settled, which other
	// tests' transactions on the same server may delay a little.
	var r result
	for deadline := time.Now().Add(pgtest.SettleTimeout); ; time.Sleep(20 * time.Millisecond) {
		if r = f.ok("events", "tail"); strings.Count(r.stdout, "\n") >= 2 || time.Now().After(deadline) {
			break
		}
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 2 ||
		!regexp.MustCompile(`^1 +\S+ +issued +`+tok.ID+` +-→issued +ledger.credit +alice`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^2 +\S+ +spend +`+tok.ID+` +issued→consumed +ledger.credit +alice +200`).MatchString(lines[1]) {
		t.Fatalf("events tail:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "next cursor: 2") {
		t.Errorf("events tail stderr = %q, want the cursor 2", r.stderr)
	}
	if r := f.ok("events", "tail", "--after", "2"); r.stdout != "" || !strings.Contains(r.stderr, "next cursor: 2") {
		t.Errorf("events tail --after 2: %v, want nothing new and cursor 2", r)
	}
	if r := f.ok("events", "tail", "--after", "1", "--json"); !strings.HasPrefix(r.stdout, `{"id":"evt_`) || !strings.Contains(r.stdout, `"type":"spend"`) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("events tail --after 1 --json:\n%s", r.stdout)
	}
	f.fails(exitUsage, "events: want tail", "events")
	f.fails(exitError, "invalid_request", "events", "tail", "--after", "x")
}

// TestJSONIsNotHTMLEscaped: --json prints what the API answered, <, > and &
// as themselves (json.Marshal would print \u003c, \u003e and \u0026).
func TestJSONIsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const subject = "<alice>&co"
	f.credit("i-html", subject, true)
	r := f.ok("list", "--json")
	var tail result
	for deadline := time.Now().Add(pgtest.SettleTimeout); ; time.Sleep(20 * time.Millisecond) {
		if tail = f.ok("events", "tail", "--json"); strings.Count(tail.stdout, "\n") >= 2 || time.Now().After(deadline) {
			break
		}
	}
	for name, out := range map[string]string{"list --json": r.stdout, "events tail --json": tail.stdout} {
		if !strings.Contains(out, `"subject":"`+subject+`"`) || strings.Contains(out, `\u003c`) || strings.Contains(out, `\u0026`) {
			t.Errorf("%s:\n%s\nwant the subject %s as it is", name, out, subject)
		}
	}
}
