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
