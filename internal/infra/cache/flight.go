package cache

import (
	"context"
	"errors"
	"sync"
)

// flights coalesces concurrent reads of one entry, like singleflight, with
// one difference that read-your-writes rests on: a caller never shares a
// read that had already started when it arrived. Such a read may have
// asked Redis, or loaded from Postgres, before a change this caller was
// told about committed; its answer may be the state from before.
//
// So each key has at most one read running and at most one waiting. A
// caller that finds a read waiting joins it: that read has not started,
// so whatever it asks is asked after the caller arrived. A caller that
// finds only a running read becomes the waiting one, and starts when the
// running read ends. A stampede on one key still costs at most one read
// at a time, and each caller waits for at most two.
type flights struct {
	mu sync.Mutex
	m  map[string]*flightQueue
}

type flightQueue struct {
	running *flight
	waiting *flight
}

type flight struct {
	done chan struct{}
	val  any
	err  error
}

// shared runs fn for ctx's caller, or joins a run of fn for the same key
// that has not started yet (see flights). fn runs under the context of
// the caller that made the run. When that context ends mid-run, the
// callers that joined get its context error although theirs are live;
// each of them then runs fn again on its own.
func shared[T any](ctx context.Context, f *flights, key string, fn func(context.Context) (T, error)) (T, error) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]*flightQueue{}
	}
	q := f.m[key]
	if q == nil {
		q = &flightQueue{}
		f.m[key] = q
	}
	if w := q.waiting; w != nil {
		f.mu.Unlock()
		return join(ctx, w, fn)
	}
	fl := &flight{done: make(chan struct{}), err: errPanicked}
	prev := q.running
	if prev == nil {
		q.running = fl
	} else {
		q.waiting = fl
	}
	f.mu.Unlock()

	if prev != nil {
		// Not bounded by ctx: the callers that joined fl rely on it to
		// run. The running read is bounded by Redis's and Postgres's
		// timeouts.
		<-prev.done
		f.mu.Lock()
		q.running, q.waiting = fl, nil
		f.mu.Unlock()
	}
	defer func() {
		f.mu.Lock()
		q.running = nil
		if q.waiting == nil && f.m[key] == q {
			delete(f.m, key)
		}
		f.mu.Unlock()
		close(fl.done)
	}()
	v, err := fn(ctx)
	fl.val, fl.err = v, err
	return v, err
}

// errPanicked is what the callers that joined a run get when fn panicked.
var errPanicked = errors.New("cache: shared read panicked")

// join waits for fl, which had not started when this caller arrived.
func join[T any](ctx context.Context, fl *flight, fn func(context.Context) (T, error)) (T, error) {
	select {
	case <-fl.done:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	if err := fl.err; err != nil && ctx.Err() == nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fn(ctx)
	}
	t, _ := fl.val.(T)
	return t, fl.err
}
