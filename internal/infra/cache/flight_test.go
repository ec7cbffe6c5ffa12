package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestSharedJoinerOutlivesStarter: a caller that joined a load whose
// starter hung up gets a result, not the starter's cancellation.
func TestSharedJoinerOutlivesStarter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g flights
		var loads atomic.Int64
		release := make(chan struct{})
		load := func(ctx context.Context) (string, error) {
			loads.Add(1)
			select {
			case <-release:
				return "row", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		type result struct {
			v   string
			err error
		}
		starter, joiner := make(chan result, 1), make(chan result, 1)
		starterCtx, hangUp := context.WithCancel(context.Background())

		go func() {
			v, err := shared(starterCtx, &g, "k", load)
			starter <- result{v, err}
		}()
		synctest.Wait() // the starter is loading
		go func() {
			v, err := shared(context.Background(), &g, "k", load)
			joiner <- result{v, err}
		}()
		synctest.Wait() // the joiner waits for the starter's load
		hangUp()
		synctest.Wait() // the starter gave up; the joiner loads again
		close(release)

		if r := <-starter; !errors.Is(r.err, context.Canceled) {
			t.Errorf("starter = %q, %v, want context.Canceled", r.v, r.err)
		}
		if r := <-joiner; r.err != nil || r.v != "row" {
			t.Errorf("joiner = %q, %v, want the row", r.v, r.err)
		}
		if n := loads.Load(); n != 2 {
			t.Errorf("loads = %d, want 2", n)
		}
	})
}

// TestSharedNeverJoinsAStartedRead: a caller arriving while a read runs
// gets the result of a read that starts after it arrived, shared with the
// others that arrived meanwhile; the running read's result goes only to
// its own callers.
func TestSharedNeverJoinsAStartedRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g flights
		var reads atomic.Int64
		release := make(chan struct{}, 2)
		read := func(context.Context) (int64, error) {
			n := reads.Add(1)
			<-release
			return n, nil
		}
		results := make(chan int64, 4)
		call := func() {
			v, err := shared(context.Background(), &g, "k", read)
			if err != nil {
				t.Error(err)
			}
			results <- v
		}
		go call()
		synctest.Wait() // read 1 runs
		go call()
		go call()
		go call()
		synctest.Wait() // three callers wait for the next read, which waits for read 1
		if n := reads.Load(); n != 1 {
			t.Fatalf("%d reads running, want 1 at a time", n)
		}
		release <- struct{}{}
		synctest.Wait()
		release <- struct{}{}
		got := map[int64]int{}
		for range 4 {
			got[<-results]++
		}
		if got[1] != 1 || got[2] != 3 || reads.Load() != 2 {
			t.Errorf("results %v from %d reads, want read 1 for its starter and read 2 for the three that came later", got, reads.Load())
		}
	})
}
