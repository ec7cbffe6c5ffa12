package dispatch

import (
	"fmt"
	"testing"
	"time"
)

// pending is a fake claim: each tenant has so many deliveries due.
func pending(due map[string]int) func(string, int, int) ([]claimed, error) {
	return func(t string, n, _ int) ([]claimed, error) {
		k := min(n, due[t])
		due[t] -= k
		out := make([]claimed, k)
		for i := range out {
			out[i] = claimed{tenant: t}
		}
		return out, nil
	}
}

// TestSharesNeverGiveMoreThanTheShare: with A tenants active, every round
// leaves each tenant at most ceil(workers / A) in flight, keeps the
// reserve for tenants with nothing in flight, and serves such a tenant
// first when it comes due.
func TestSharesNeverGiveMoreThanTheShare(t *testing.T) {
	t.Parallel()
	for _, hostile := range []int{1, 3, 6, 12, 63, 100} {
		t.Run(fmt.Sprint(hostile), func(t *testing.T) {
			s := newShares(64)
			due := map[string]int{}
			var names []string
			for i := range hostile {
				n := fmt.Sprintf("h%03d", i)
				due[n], names = 1000, append(names, n)
			}
			for range 5 { // attempts hang: nothing ends
				if _, _, err := s.allot(names, 64, pending(due)); err != nil {
					t.Fatal(err)
				}
			}
			limit := (64 + hostile - 1) / hostile
			for _, n := range names {
				if s.inflight[n] > limit {
					t.Errorf("%s has %d in flight, want at most ceil(64/%d) = %d", n, s.inflight[n], hostile, limit)
				}
			}
			if hostile < 64-s.reserve && s.free() < s.reserve {
				t.Errorf("%d hostile tenants left %d free, want the reserve %d", hostile, s.free(), s.reserve)
			}
			// A healthy tenant comes due: it is served in the next round.
			due["ok"] = 5
			got, starved, err := s.allot(append(names, "ok"), 64, pending(due))
			if err != nil {
				t.Fatal(err)
			}
			served := 0
			for _, c := range got {
				if c.tenant == "ok" {
					served++
				}
			}
			if served == 0 && starved == 0 {
				t.Errorf("the healthy tenant got no worker and none was wanted for it")
			}
		})
	}
}

// TestPreemptCutsTheBiggestTenantsOldest: preempt cancels the attempt
// running longest of the tenant with the most in flight, only past
// preemptAfter.
func TestPreemptCutsTheBiggestTenantsOldest(t *testing.T) {
	t.Parallel()
	s := newShares(8)
	now := time.Now()
	cut := map[uint64]bool{}
	add := func(id uint64, tenant string, age time.Duration) {
		c := claimed{id: id, tenant: tenant}
		s.take(c)
		s.flights[id] = flight{tenant: tenant, start: now.Add(-age), cancel: func(error) { cut[id] = true }}
	}
	add(1, "a", 5*time.Second)
	add(2, "b", 9*time.Second)
	add(3, "b", 3*time.Second)
	add(4, "b", 100*time.Millisecond)
	if n := s.preempt(1, now); n != 1 || !cut[2] || len(cut) != 1 {
		t.Errorf("preempt cut %d: %v, want attempt 2 (b's oldest)", n, cut)
	}
	s.end(claimed{id: 2, tenant: "b"})
	if n := s.preempt(1, now); n != 1 || !cut[3] {
		t.Errorf("preempt cut %d: %v, want attempt 3 next", n, cut)
	}
	s.end(claimed{id: 3, tenant: "b"})
	// b and a hold one each; b's is too young, a's goes (ties by name).
	if n := s.preempt(1, now); n != 1 || !cut[1] {
		t.Errorf("preempt cut %d: %v, want attempt 1 (a's, the only one past %v)", n, cut, preemptAfter)
	}
}

// TestReserveIsForTenantsWithNothingInFlightAnywhere: a tenant whose
// attempts run on another instance (store.DueTenants counts them) is no
// newcomer here: it does not take this instance's reserve, which stays for
// a tenant with nothing in flight anywhere. Before, each instance gave its
// reserve to whoever had nothing in flight on it, so a tenant hanging on
// one instance took the reserve of every other.
func TestReserveIsForTenantsWithNothingInFlightAnywhere(t *testing.T) {
	t.Parallel()
	s := newShares(8) // reserve 1
	due := map[string]int{"x": 100, "h": 100}
	if _, _, err := s.allot([]string{"x"}, 8, pending(due)); err != nil {
		t.Fatal(err)
	}
	if s.free() != s.reserve {
		t.Fatalf("x alone left %d free, want the reserve %d", s.free(), s.reserve)
	}
	s.elsewhere = map[string]int{"h": 4, "x": 7} // h's attempts hang on another instance
	got, _, err := s.allot([]string{"h", "x"}, 8, pending(due))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || s.free() != s.reserve {
		t.Errorf("h, in flight elsewhere, got %d workers here, leaving %d free; want none, the reserve left", len(got), s.free())
	}
	due["b"] = 5
	got, starved, err := s.allot([]string{"b", "h", "x"}, 8, pending(due))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].tenant != "b" || starved != 0 {
		t.Errorf("b, with nothing in flight anywhere, got %v (%d starved), want the reserve worker", got, starved)
	}
}

// TestCadencePassesActiveTenantsBetweenFullPasses: after a pass that fanned
// out a tenant's events, the next pass comes a tenth of an interval later
// and positions that tenant only; a tenant quiet for an interval drops out
// and, none active, the next pass is the full one an interval after the
// last; after a pass longer than a tenth of an interval, the wait is as
// long as the pass. Before, every pass was full and came an interval after
// the last, so an event committed just too late for one waited a whole
// interval.
func TestCadencePassesActiveTenantsBetweenFullPasses(t *testing.T) {
	t.Parallel()
	const iv = time.Second
	t0 := time.Unix(1000, 0)
	c := cadence{interval: iv, active: map[string]time.Time{}}
	if only := c.next(t0); only != nil {
		t.Fatalf("first pass: %v, want every tenant (nil)", only)
	}
	if w := c.done(t0.Add(5*time.Millisecond), t0.Add(10*time.Millisecond), nil); w != iv-10*time.Millisecond {
		t.Errorf("idle: wait %v, want the rest of the interval", w)
	}
	// A pass of every tenant at 1 s fans out b's events.
	if only := c.next(t0.Add(iv)); only != nil {
		t.Fatalf("pass an interval later: %v, want every tenant", only)
	}
	if w := c.done(t0.Add(iv+5*time.Millisecond), t0.Add(iv+10*time.Millisecond), []string{"b"}); w != iv/10 {
		t.Errorf("b active: wait %v, want %v", w, iv/10)
	}
	// The short passes position b only, while b keeps moving.
	at := t0.Add(iv + 110*time.Millisecond)
	if only := c.next(at); len(only) != 1 || only[0] != "b" {
		t.Fatalf("short pass: %v, want [b]", only)
	}
	if w := c.done(at, at.Add(5*time.Millisecond), []string{"b", "c"}); w != iv/10 {
		t.Errorf("b, c active: wait %v, want %v", w, iv/10)
	}
	if only := c.next(at.Add(105 * time.Millisecond)); len(only) != 2 {
		t.Fatalf("short pass: %v, want [b c]", only)
	}
	// Quiet for an interval, they drop out: the next pass is the full one.
	late := t0.Add(iv + 900*time.Millisecond)
	if w := c.done(late.Add(-5*time.Millisecond), late, nil); w != iv/10 {
		t.Errorf("b, c still active at %v: wait %v, want %v", late.Sub(t0), w, iv/10)
	}
	later := t0.Add(iv + 1200*time.Millisecond)
	if w := c.done(later.Add(-5*time.Millisecond), later, nil); w != 0 || len(c.active) != 0 {
		t.Errorf("quiet for an interval: wait %v with %v active, want 0 and none (the full pass is due)", w, c.active)
	}
	if only := c.next(later); only != nil {
		t.Errorf("after an interval: %v, want every tenant", only)
	}
	// A long pass of an active tenant is followed by a wait as long.
	if w := c.done(later, later.Add(300*time.Millisecond), []string{"b"}); w != 300*time.Millisecond {
		t.Errorf("after a pass of 300 ms: wait %v, want 300ms", w)
	}
}
