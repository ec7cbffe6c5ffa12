package cache

import (
	"sync"
	"sync/atomic"
	"time"
)

// The breaker's states, as Observer.ObserveBreaker names them.
const (
	stateClosed   = "closed"    // Redis is called
	stateOpen     = "open"      // Redis is skipped until the cool-down ends
	stateHalfOpen = "half_open" // one call is probing Redis; the others skip it
)

// breaker keeps calls away from a Redis that keeps failing: threshold
// consecutive failures open it, an open breaker refuses calls for cooldown,
// then lets one call through as a probe, whose success closes it and whose
// failure opens it again.
type breaker struct {
	threshold int
	cooldown  time.Duration
	now       func() time.Time   // a test's clock, or time.Now
	onChange  func(state string) // called with mu held, so in order

	// state and failures are read without mu on the hot path, where the
	// breaker is closed and Redis answers; they change only with mu held.
	state    atomic.Pointer[string]
	failures atomic.Int64

	mu    sync.Mutex
	until time.Time // when an open breaker lets a probe through
}

func newBreaker(threshold int, cooldown time.Duration, onChange func(string)) *breaker {
	b := &breaker{threshold: threshold, cooldown: cooldown, now: time.Now, onChange: onChange}
	s := stateClosed
	b.state.Store(&s)
	return b
}

// current returns the breaker's state.
func (b *breaker) current() string { return *b.state.Load() }

// allow reports whether a call may go to Redis now. A caller that is
// allowed must report the call's result to success or failure.
func (b *breaker) allow() bool {
	if b.current() == stateClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.current() {
	case stateClosed:
		return true
	case stateOpen:
		if b.now().Before(b.until) {
			return false
		}
		b.set(stateHalfOpen) // this caller is the probe
		return true
	}
	return false // half open: a probe is already out
}

// success records a call Redis answered. Any answer shows Redis is back,
// even one to a call that started before the breaker opened.
func (b *breaker) success() {
	if b.current() == stateClosed && b.failures.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures.Store(0)
	if b.current() != stateClosed {
		b.set(stateClosed)
	}
}

// failure records a call Redis did not answer in time, or at all.
func (b *breaker) failure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.failures.Add(1)
	switch b.current() {
	case stateClosed:
		if n < int64(b.threshold) {
			return
		}
	case stateOpen:
		return // a call from before the breaker opened; the cool-down stands
	}
	b.until = b.now().Add(b.cooldown)
	b.set(stateOpen)
}

func (b *breaker) set(s string) {
	b.state.Store(&s)
	if b.onChange != nil {
		b.onChange(s)
	}
}
