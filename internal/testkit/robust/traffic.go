package robust

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Traffic drives clients against tokend until its context ends: it issues
// tokens for new intents (some with a TTL short enough to expire during the
// run, some under the lease-mode operation), and spends, reads, revokes,
// reports on and reconciles them, several clients on the same recent
// tokens at once. Requests that get no answer are retried, as a client
// would, with the same intent ID or the same token.
type Traffic struct {
	Prefix string // intent IDs start with it
	// Expiring is the percent of issues with a TTL of 1–2 s (0: 15).
	// ShortLeases puts half the lease intents under the 1 s lease
	// operation, whose holders vanish half the time: the lease lapses
	// (the sweeper makes it unknown) and an operator reconciles it.
	Expiring    int
	ShortLeases bool

	mu     sync.Mutex
	tokens []*live // tokens some client holds the secret of
	byName map[string]*intent
	n      int
}

// known is the intent named name, if the traffic issued it.
func (tr *Traffic) known(name string) *intent {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.byName[name]
}

// live is an issued token the traffic knows the id and secret of.
type live struct {
	it     *intent
	id     string
	secret string
}

// recent picks one of the last few tokens, where clients meet.
func (tr *Traffic) recent(r *rand.Rand) *live {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.tokens) == 0 {
		return nil
	}
	k := min(len(tr.tokens), 16)
	return tr.tokens[len(tr.tokens)-1-r.IntN(k)]
}

func (tr *Traffic) newIntent(r *rand.Rand) *intent {
	tr.mu.Lock()
	tr.n++
	n := tr.n
	tr.mu.Unlock()
	it := &intent{name: fmt.Sprintf("%s-%d", tr.Prefix, n), amount: 1 + r.Int64N(9), ttl: 600}
	it.lease = r.IntN(100) < 30
	it.short = it.lease && tr.ShortLeases && r.IntN(2) == 0
	expiring := tr.Expiring
	if expiring == 0 {
		expiring = 15
	}
	if r.IntN(100) < expiring {
		it.ttl = 1 + r.IntN(2) // expires while the run goes on
	}
	tr.mu.Lock()
	if tr.byName == nil {
		tr.byName = map[string]*intent{}
	}
	tr.byName[it.name] = it
	tr.mu.Unlock()
	return it
}

// Run is one client's loop.
func (tr *Traffic) Run(ctx context.Context, c *Client) {
	for ctx.Err() == nil {
		p := c.Rand.IntN(100)
		l := tr.recent(c.Rand)
		switch {
		case p < 22 || l == nil:
			tr.issue(ctx, c)
		case p < 55:
			tr.spend(ctx, c, l)
		case p < 80:
			c.Get(ctx, l.it, l.id)
		case p < 85:
			c.List(ctx, l.it.operation(), []string{"", "", "issued", "expired", "pending", "consumed", "unknown"}[c.Rand.IntN(7)], tr.known)
		case p < 90:
			c.Revoke(ctx, l.it, l.id)
		default:
			// A replay of the issue: same answer, or 422 for a changed payload.
			c.Issue(ctx, l.it, c.Rand.IntN(2))
		}
	}
}

// retry sends until the answer is definite, a bounded number of times.
func retry(ctx context.Context, send func() Output) Output {
	var out Output
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		if out = send(); !out.Unknown && out.Status != 429 {
			return out
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50*(i+1)) * time.Millisecond):
		}
	}
	return out
}

func (tr *Traffic) issue(ctx context.Context, c *Client) {
	it := tr.newIntent(c.Rand)
	out := retry(ctx, func() Output { return c.Issue(ctx, it, 0) })
	if out.Unknown || out.Status != 201 || out.Secret == "" {
		return
	}
	tr.mu.Lock()
	tr.tokens = append(tr.tokens, &live{it: it, id: out.ID, secret: out.Secret})
	tr.mu.Unlock()
}

func (tr *Traffic) spend(ctx context.Context, c *Client, l *live) {
	ok := c.Rand.IntN(100) < 92
	out := retry(ctx, func() Output { return c.Spend(ctx, l.it, l.secret, ok) })
	if !l.it.lease || out.Unknown || out.Status != 202 {
		return
	}
	gen := out.Gen
	if l.it.short && c.Rand.IntN(2) == 0 {
		// The holder vanishes: the lease lapses, the sweeper makes the
		// token unknown, and an operator reconciles it.
		sleep(ctx, between(c.Rand, 1200*time.Millisecond, 2500*time.Millisecond))
		outcome := []string{"succeeded", "not_executed", "failed"}[c.Rand.IntN(3)]
		retry(ctx, func() Output { return c.Reconcile(ctx, l.it, l.id, outcome) })
		return
	}
	// The lease holder reports, like a worker whose downstream call ended.
	kind := []Kind{KindComplete, KindFail, KindUnknown}[c.Rand.IntN(3)]
	out = retry(ctx, func() Output { return c.Report(ctx, l.it, l.id, kind, gen) })
	if kind != KindUnknown || out.Unknown || out.Status != 200 {
		return
	}
	outcome := []string{"succeeded", "not_executed", "failed"}[c.Rand.IntN(3)]
	retry(ctx, func() Output { return c.Reconcile(ctx, l.it, l.id, outcome) })
}
