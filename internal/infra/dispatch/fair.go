package dispatch

import (
	"context"
	"errors"
	"slices"
	"time"
)

// preemptAfter is how long an attempt runs before it may be cut short for
// a tenant that has nothing in flight and finds no free worker.
const preemptAfter = time.Second

// errPreempted is a preempted attempt's error, as the tenant reads it.
var errPreempted = errors.New("preempted: the attempt took a worker other tenants were waiting for")

// shares is how one dispatcher divides its workers among tenants: fairness
// as a property of the scheduler, not of a cap (docs/webhooks.md).
//
//   - A tenant's share is ceil((workers - reserve) / active), active being
//     the tenants with deliveries due or in flight here: it shrinks as more
//     tenants are active, and no tenant holds more while others wait.
//   - The reserve (workers/8, at least 1) goes only to tenants with nothing
//     in flight here or on any other instance (newcomers), so a tenant
//     whose deliveries come due finds a worker at once, whatever the
//     others hold.
//   - Workers are handed out round robin among the tenants with deliveries
//     due, from the one after the tenant served last, never by the age of
//     the oldest delivery (which a hanging tenant always wins).
//   - Endpoints whose last attempt failed (suspect) get one attempt in
//     flight each (store.ClaimPickSQL) and at most a quarter of the workers
//     between them, so hanging endpoints, once they have failed, hold at
//     most that many workers, each for at most Config.Timeout.
//   - When a tenant with nothing in flight finds no free worker (the reserve
//     taken by other newcomers, say tenants whose endpoints hang and have
//     not failed yet), the attempt running longest, past preemptAfter, of
//     the tenant holding the most workers is cut short and recorded as a
//     failed attempt (errPreempted): no tenant waits an attempt timeout.
type shares struct {
	workers, reserve, suspectCap int
	busy, suspect                int            // in flight here: all, and to suspect endpoints
	inflight                     map[string]int // tenant → in flight here
	// elsewhere is, for the round being allotted, what each due tenant has
	// in flight on every instance together (store.DueTenants): a tenant
	// with attempts running on another instance is no newcomer here, so a
	// tenant whose endpoints hang cannot take every instance's reserve.
	elsewhere map[string]int
	// contended is whether, in the last round, another instance held the
	// claim lock of a tenant this one wanted to claim for: the next round
	// comes sooner, so that deliveries made while that claim ran wait for
	// no full Interval.
	contended bool
	last      string // the tenant served last
	flights   map[uint64]flight
}

// flight is an attempt in flight, which preempt may cut short.
type flight struct {
	tenant string
	start  time.Time
	cancel context.CancelCauseFunc
}

func newShares(workers int) *shares {
	return &shares{workers: workers, reserve: max(1, workers/8), suspectCap: max(1, workers/4), inflight: map[string]int{},
		flights: map[uint64]flight{}}
}

// fly records c's attempt as cancellable by preempt.
func (s *shares) fly(c claimed, cancel context.CancelCauseFunc) {
	s.flights[c.id] = flight{tenant: c.tenant, start: time.Now(), cancel: cancel}
}

// preempt cuts short up to n attempts: each time, of the tenant with the
// most in flight, its attempt running longest, if past preemptAfter.
func (s *shares) preempt(n int, now time.Time) int {
	cut := 0
	for range n {
		most := ""
		for t, k := range s.inflight {
			if k > s.inflight[most] || k == s.inflight[most] && t < most {
				most = t
			}
		}
		var id uint64
		var oldest *flight
		for i, f := range s.flights {
			if f.tenant == most && now.Sub(f.start) >= preemptAfter && (oldest == nil || f.start.Before(oldest.start)) {
				f := f
				id, oldest = i, &f
			}
		}
		if oldest == nil {
			return cut
		}
		oldest.cancel(errPreempted)
		delete(s.flights, id)
		cut++
	}
	return cut
}

func (s *shares) free() int { return s.workers - s.busy }

// take counts a claimed delivery in flight.
func (s *shares) take(c claimed) {
	s.busy++
	s.inflight[c.tenant]++
	if c.suspect {
		s.suspect++
	}
	s.last = c.tenant
}

// end counts a delivery out of flight.
func (s *shares) end(c claimed) {
	s.busy--
	delete(s.flights, c.id)
	if s.inflight[c.tenant]--; s.inflight[c.tenant] <= 0 {
		delete(s.inflight, c.tenant)
	}
	if c.suspect {
		s.suspect--
	}
}

// newcomer is whether t has nothing in flight, here or elsewhere.
func (s *shares) newcomer(t string) bool { return s.inflight[t] == 0 && s.elsewhere[t] == 0 }

// order is due (sorted by name) starting after the tenant served last.
func (s *shares) order(due []string) []string {
	i, _ := slices.BinarySearch(due, s.last)
	if i < len(due) && due[i] == s.last {
		i++
	}
	return append(slices.Clone(due[i:]), due[:i]...)
}

// share is what a tenant may have in flight here while due tenants wait.
func (s *shares) share(due []string) int {
	active := len(s.inflight)
	for _, t := range due {
		if s.inflight[t] == 0 {
			active++
		}
	}
	if active == 0 {
		return s.workers
	}
	return max(1, (s.workers-s.reserve+active-1)/active)
}

// allot plans a round: claim(tenant, n) claims up to n of tenant's due
// deliveries and answers them, after which they count in flight. It
// serves newcomers first (tenants with nothing in flight anywhere: the reserve
// is theirs), then tops every tenant up to its share from the workers
// above the reserve, at most batch in all. starved is how many newcomers
// found no free worker.
func (s *shares) allot(due []string, batch int, claim func(tenant string, n, suspect int) ([]claimed, error)) (_ []claimed, starved int, err error) {
	due = slices.Clone(due)
	slices.Sort(due)
	order := s.order(due)
	share := s.share(due)
	newcomers := 0
	for _, t := range order {
		if s.newcomer(t) {
			newcomers++
		}
	}
	var out []claimed
	try := func(t string, n int) error {
		n = min(n, batch-len(out), s.free())
		if n <= 0 {
			return nil
		}
		cs, err := claim(t, n, max(0, s.suspectCap-s.suspect))
		for _, c := range cs {
			s.take(c)
		}
		out = append(out, cs...)
		return err
	}
	if newcomers > 0 {
		first := max(1, min(share, s.reserve/newcomers))
		for _, t := range order {
			if s.newcomer(t) {
				if s.free() == 0 {
					starved++
					continue
				}
				if err := try(t, first); err != nil {
					return out, starved, err
				}
			}
		}
	}
	for _, t := range order {
		if err := try(t, min(share-s.inflight[t], s.free()-s.reserve)); err != nil {
			return out, starved, err
		}
	}
	return out, starved, nil
}
