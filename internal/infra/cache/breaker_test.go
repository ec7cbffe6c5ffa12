package cache

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tokend/tokend/token"
)

func TestBreaker(t *testing.T) {
	const cooldown = time.Minute
	type step struct {
		do        string // "allow", "success", "failure" or "wait" (the cool-down)
		wantAllow bool   // for "allow"
		want      string // the state after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"failures below the threshold keep it closed", []step{
			{do: "failure", want: stateClosed},
			{do: "failure", want: stateClosed},
			{do: "success", want: stateClosed},
			{do: "failure", want: stateClosed},
			{do: "failure", want: stateClosed},
			{do: "allow", wantAllow: true, want: stateClosed},
		}},
		{"threshold consecutive failures open it until the cool-down ends", []step{
			{do: "failure", want: stateClosed},
			{do: "failure", want: stateClosed},
			{do: "failure", want: stateOpen},
			{do: "allow", wantAllow: false, want: stateOpen},
			{do: "wait", want: stateOpen},
			{do: "allow", wantAllow: true, want: stateHalfOpen},
			{do: "allow", wantAllow: false, want: stateHalfOpen},
		}},
		{"a probe that succeeds closes it", []step{
			{do: "failure"}, {do: "failure"}, {do: "failure", want: stateOpen},
			{do: "wait", want: stateOpen},
			{do: "allow", wantAllow: true, want: stateHalfOpen},
			{do: "success", want: stateClosed},
			{do: "allow", wantAllow: true, want: stateClosed},
		}},
		{"a probe that fails opens it for another cool-down", []step{
			{do: "failure"}, {do: "failure"}, {do: "failure", want: stateOpen},
			{do: "wait", want: stateOpen},
			{do: "allow", wantAllow: true, want: stateHalfOpen},
			{do: "failure", want: stateOpen},
			{do: "allow", wantAllow: false, want: stateOpen},
			{do: "wait", want: stateOpen},
			{do: "allow", wantAllow: true, want: stateHalfOpen},
		}},
		{"a late failure does not extend the cool-down", []step{
			{do: "failure"}, {do: "failure"}, {do: "failure", want: stateOpen},
			{do: "failure", want: stateOpen},
			{do: "wait", want: stateOpen},
			{do: "allow", wantAllow: true, want: stateHalfOpen},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1e9, 0)}
			b := newBreaker(3, cooldown, nil)
			b.now = clock.Now
			for i, s := range tt.steps {
				switch s.do {
				case "allow":
					if got := b.allow(); got != s.wantAllow {
						t.Fatalf("step %d: allow() = %v, want %v", i, got, s.wantAllow)
					}
				case "success":
					b.success()
				case "failure":
					b.failure()
				case "wait":
					clock.Advance(cooldown)
				}
				if s.want != "" && b.current() != s.want {
					t.Fatalf("step %d (%s): state %s, want %s", i, s.do, b.current(), s.want)
				}
			}
		})
	}
}

// TestRedisDownAndBack closes Redis under a Cache: lookups keep working from
// the loader with no error, the breaker opens after the threshold and then
// keeps Redis out of the way, and it closes once Redis is back and the
// cool-down is over.
func TestRedisDownAndBack(t *testing.T) {
	const cooldown = time.Minute
	ctx := context.Background()
	// Without the in-process layer, which would serve the terminal record
	// without asking Redis.
	c, mr, obs := openMini(t, Config{BreakerThreshold: 3, BreakerCooldown: cooldown, LocalTTL: -1})
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	c.breaker.now = clock.Now
	rec := record("acme")
	d := newDB(rec)
	lookup := func(step string) {
		t.Helper()
		got, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID))
		if err != nil || got.ID != rec.ID {
			t.Fatalf("%s: GetOrLoad = %+v, %v, want the record and no error", step, got, err)
		}
	}
	lookup("warm up")

	mr.Close()
	for i := range 3 {
		before := d.loads.Load()
		lookup("Redis down")
		if d.loads.Load() != before+1 {
			t.Fatalf("lookup %d with Redis down did not load", i)
		}
	}
	if c.Status() != StatusDegraded || c.Healthy() {
		t.Fatalf("after 3 failures Status = %s, want %s", c.Status(), StatusDegraded)
	}
	errors, skipped := obs.count(kindToken, resultError), obs.count(kindToken, resultSkipped)

	for range 5 {
		lookup("breaker open")
	}
	c.Invalidate(ctx, "acme", rec.ID, token.Revoked, 0)
	if n := obs.count(kindToken, resultSkipped) - skipped; n != 5 {
		t.Errorf("%d lookups skipped Redis with the breaker open, want 5", n)
	}
	if n := obs.count(kindToken, resultError); n != errors {
		t.Errorf("Redis was called with the breaker open: errors went from %d to %d", errors, n)
	}

	// The cool-down ends while Redis is still down: the probe fails.
	clock.Advance(cooldown)
	lookup("probe, Redis down")
	if c.Status() != StatusDegraded {
		t.Fatalf("after a failed probe Status = %s, want %s", c.Status(), StatusDegraded)
	}

	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	lookup("Redis back, cool-down running")
	if c.Status() != StatusDegraded {
		t.Fatalf("before the cool-down ended Status = %s, want %s", c.Status(), StatusDegraded)
	}
	clock.Advance(cooldown)
	lookup("probe, Redis back")
	if c.Status() != StatusOK || !c.Healthy() {
		t.Fatalf("after a successful probe Status = %s, want %s", c.Status(), StatusOK)
	}
	want := []string{stateClosed, stateOpen, stateHalfOpen, stateOpen, stateHalfOpen, stateClosed}
	if got := obs.breakerStates(); !reflect.DeepEqual(got, want) {
		t.Errorf("breaker went through %v, want %v", got, want)
	}
}
