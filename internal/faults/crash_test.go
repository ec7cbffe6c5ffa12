package faults

import (
	"context"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// tokend is killed with SIGKILL while 16 clients spend 200 distinct tokens
// (ledger.credit, amount 1, an account each), and restarted on the same
// address. Every client retries its spend with the same token until the
// answer is final. Then the ledger moved exactly once per token, and every
// token's state is what its client was finally told.
func TestKillDuringSpendStorm(t *testing.T) {
	t.Parallel()
	const (
		tokens    = 200
		clients   = 16
		killAfter = tokens / 4 // final answers before the kill
		tenant    = "storm"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbURL := ledgertest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})
	c := newClient(t, srv.URL, proctest.CreateKey(t, dbURL, tenant, "client"))
	in := func(i int) intent { return credit(fmt.Sprintf("acct-%d", i), 1) }
	toks := c.issueAll(ctx, t, "storm", tokens, in)

	var (
		all      tally
		finals   = make([]response, tokens)
		attempts = make([][]attempt, tokens)
		answered atomic.Int64
		inFlight atomic.Int64
		wg       sync.WaitGroup
	)
	work := make(chan int)
	go func() {
		defer close(work)
		for i := range tokens {
			work <- i
		}
	}()
	t.Cleanup(wg.Wait) // after the deferred cancel, should the test end early
	for range clients {
		wg.Go(func() {
			for i := range work {
				finals[i], attempts[i] = untilDefinitive(ctx, func(ctx context.Context) response {
					inFlight.Add(1)
					defer inFlight.Add(-1)
					return c.spend(ctx, toks[i].Token, in(i))
				})
				all.add(attempts[i])
				answered.Add(1)
			}
		})
	}

	if !waitFor(ctx, func() bool { return answered.Load() >= killAfter }) {
		t.Fatalf("only %d of %d spends answered before the deadline", answered.Load(), tokens)
	}
	killedAt, answeredAtKill, busy := time.Now(), answered.Load(), inFlight.Load()
	srv.Kill()
	srv.Restart()
	healthy := time.Since(killedAt)
	wg.Wait()

	told := make(map[string]response, tokens)
	var inFlightCommitted, inFlightRolledBack, refused int
	for i, r := range finals {
		told[toks[i].ID] = r
		if r.status != http.StatusOK {
			t.Errorf("token %d (%s): final answer %s, want 200", i, toks[i].ID, r)
		}
		switch {
		case !saw(attempts[i], classConnError):
		case wasInFlight(attempts[i], killedAt) && classify(r) == classReplayed:
			inFlightCommitted++
		case wasInFlight(attempts[i], killedAt):
			inFlightRolledBack++
		default:
			refused++
		}
	}

	o := all.outage()
	t.Logf("kill -9 after %d of %d spends answered, %d in flight; healthy again %v after the kill; clients failed from +%v to +%v, first final answer to a request sent after the kill at +%v",
		answeredAtKill, tokens, busy, healthy.Round(time.Millisecond), offset(killedAt, o.first), offset(killedAt, o.last), offset(killedAt, all.firstSuccessAfter(killedAt)))
	t.Logf("client requests: %v", &all)
	t.Logf("cut by the kill: %d spends had committed (answer lost, replayed on retry), %d had not (executed on retry); %d more were refused while tokend was down",
		inFlightCommitted, inFlightRolledBack, refused)
	if o.failures == 0 {
		t.Errorf("no client saw the kill: the storm ended before it, and this test proved nothing")
	}
	if n := checkExactlyOnce(ctx, t, dbURL, tenant, 1, told); n != tokens {
		t.Errorf("%d of %d tokens consumed", n, tokens)
	}
}

// wasInFlight reports whether a request of as was sent before at and lost
// its connection: the kill cut it.
func wasInFlight(as []attempt, at time.Time) bool {
	for _, a := range as {
		if a.class == classConnError && a.sent.Before(at) && !a.at.Before(at) {
			return true
		}
	}
	return false
}
