package main

import (
	"regexp"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if r := f.ok("stats"); !regexp.MustCompile(`(?m)^pending +0\nunknown +0\noldest_pending_age +-\noldest_unknown_age +-\n\z`).MatchString(r.stdout) {
		t.Errorf("stats with nothing waiting:\n%s", r.stdout)
	}

	f.declareLease()
	pending, _ := f.leased("pay-1")
	unknown := f.unknown("pay-2")
	f.credit("i-1", "alice", true) // finished: not counted
	f.exec(`UPDATE tokens SET created_at = now() - interval '2 hours' WHERE id = $1`, pending.ID)
	f.exec(`UPDATE tokens SET created_at = now() - interval '3 hours' WHERE id = $1`, unknown.ID)

	var s struct {
		Pending                 int64 `json:"pending"`
		Unknown                 int64 `json:"unknown"`
		OldestPendingAgeSeconds int64 `json:"oldest_pending_age_seconds"`
		OldestUnknownAgeSeconds int64 `json:"oldest_unknown_age_seconds"`
	}
	f.okJSON(&s, "stats")
	// The ages grow while the test runs; a minute of slack is plenty.
	near := func(got int64, want time.Duration) bool {
		return got >= int64(want.Seconds()) && got < int64((want+time.Minute).Seconds())
	}
	if s.Pending != 1 || s.Unknown != 1 || !near(s.OldestPendingAgeSeconds, 2*time.Hour) || !near(s.OldestUnknownAgeSeconds, 3*time.Hour) {
		t.Errorf("stats = %+v, want 1 pending 2h old and 1 unknown 3h old", s)
	}
	r := f.ok("stats")
	for _, re := range []string{`(?m)^pending +1$`, `(?m)^unknown +1$`, `(?m)^oldest_pending_age +2h0m\d+s$`, `(?m)^oldest_unknown_age +3h0m\d+s$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("stats lacks %s:\n%s", re, r.stdout)
		}
	}
}
