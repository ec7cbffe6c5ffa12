package main

import (
	"regexp"
	"slices"
	"testing"
)

// An issued token past its expiry, by the database clock, is expired in
// what tokenctl shows and in what it may do, before the sweeper records it;
// the first read that finds it records the expiry, and the revoke changes
// nothing.
func TestExpiredBeforeTheSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	late := f.credit("late", "alice", false)
	live := f.credit("live", "alice", false)
	f.exec(`UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1`, late.ID)

	tests := []struct {
		state string
		want  []string
	}{
		{"expired", []string{late.ID}},
		{"issued", []string{live.ID}},
	}
	for _, tt := range tests {
		var p page
		f.okJSON(&p, "list", "--state", tt.state)
		if !slices.Equal(ids(p.Items), tt.want) {
			t.Errorf("list --state %s = %v, want %v", tt.state, ids(p.Items), tt.want)
		}
	}
	if r := f.ok("inspect", late.ID); !regexp.MustCompile(`(?m)^state +expired$`).MatchString(r.stdout) {
		t.Errorf("inspect of a token past expiry:\n%s", r.stdout)
	}
	f.fails(exitConflict, "invalid_state", "revoke", late.ID, "--reason", "too late")
	if s := f.state(late.ID); s != "expired" {
		t.Errorf("the row is %s; want expired, as the first read recorded it, and not revoked", s)
	}
}
