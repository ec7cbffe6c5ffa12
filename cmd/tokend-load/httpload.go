package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokend/tokend/client"
)

// errExhausted ends a worker's loop: the workload has nothing left to do
// (no unspent token left, or a pre-issue quota reached).
var errExhausted = errors.New("workload exhausted")

// target is one tokend instance.
type target struct {
	base string // base URL, e.g. http://127.0.0.1:18080
	key  string // client API key
}

// spendable is a token issued through the API and not yet spent by the load.
type spendable struct {
	id, secret, subject, account string
}

// tokenPool hands out each spendable token once and remembers the ids of
// every token issued, for lookups. It is safe for concurrent use.
type tokenPool struct {
	mu   sync.Mutex
	toks []spendable
	next int
	ids  []string
	seq  atomic.Int64 // numbers intents; see newIssue
	run  string       // makes intent ids unique across runs on one database
	// accounts is how many ledger accounts spends are spread over.
	accounts int
}

func newTokenPool(run string, accounts int) *tokenPool {
	return &tokenPool{run: run, accounts: max(accounts, 1)}
}

func (p *tokenPool) add(t spendable) {
	p.mu.Lock()
	p.toks = append(p.toks, t)
	if len(p.ids) < maxLookupIDs {
		p.ids = append(p.ids, t.id)
	}
	p.mu.Unlock()
}

// maxLookupIDs bounds the ids lookups choose from: enough to spread over
// many index pages, few enough to warm every one of them in a cache.
const maxLookupIDs = 5000

func (p *tokenPool) take() (spendable, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next == len(p.toks) {
		return spendable{}, false
	}
	t := p.toks[p.next]
	p.toks[p.next] = spendable{} // let the secret go
	p.next++
	if p.next == len(p.toks) {
		p.toks, p.next = p.toks[:0], 0
	}
	return t, true
}

func (p *tokenPool) remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.toks) - p.next
}

func (p *tokenPool) lookupIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids)
}

// reset forgets every token, after the tables were emptied.
func (p *tokenPool) reset() {
	p.mu.Lock()
	p.toks, p.next, p.ids = nil, 0, nil
	p.mu.Unlock()
}

// request performs one request of a workload with the worker's client and
// random source. It returns errExhausted when there is nothing left to do.
type request func(ctx context.Context, c *client.Client, rng *rand.Rand) error

// loadResult is what one timed run of a workload measured.
type loadResult struct {
	OK        int64           // requests answered as expected
	Errors    int64           // requests that failed or got another status
	FirstErr  string          // one of the errors, for the report
	Elapsed   time.Duration   // from the common start to the last worker's end
	Latencies []time.Duration // of the OK requests, sorted
	Exhausted bool            // the run ended early, out of work
}

// TPS is OK requests per second of Elapsed.
func (r loadResult) TPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// newClient returns a keep-alive client for c concurrent workers against one
// host. Each run gets its own, so runs do not share connections.
func newClient(c int) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		MaxIdleConns:        c + 8,
		MaxIdleConnsPerHost: c + 8,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr
}

// newAPI returns a client of tgt over hc that sends each call once: a
// retry would hide what the run measures.
func newAPI(tgt target, hc *http.Client) (*client.Client, error) {
	return client.New(tgt.base, tgt.key, client.WithHTTPClient(hc), client.WithRetry(client.Retry{Attempts: 1}),
		client.WithUserAgent("tokend-load"))
}

// runLoad runs req in c workers for d (until ctx ends, or until the workload
// is exhausted). Before the clock starts every worker opens its connection
// with an untimed GET /healthz, so the run measures requests, not dials.
func runLoad(ctx context.Context, tgt target, c int, d time.Duration, req request) loadResult {
	hc, tr := newClient(c)
	defer tr.CloseIdleConnections()
	api, err := newAPI(tgt, hc)
	if err != nil {
		return loadResult{Errors: 1, FirstErr: err.Error()}
	}

	type workerOut struct {
		lat      []time.Duration
		errs     int64
		firstErr string
		done     bool // exhausted
	}
	outs := make([]workerOut, c)
	var ready, finished sync.WaitGroup
	start := make(chan struct{})
	var t0 time.Time
	var deadline time.Time
	ready.Add(c)
	finished.Add(c)
	for w := range c {
		go func() {
			defer finished.Done()
			o := &outs[w]
			o.lat = make([]time.Duration, 0, 1024)
			rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(time.Now().UnixNano())))
			warm(ctx, hc, tgt)
			ready.Done()
			<-start
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := time.Now()
				err := req(ctx, api, rng)
				lat := time.Since(s)
				switch {
				case errors.Is(err, errExhausted):
					o.done = true
					return
				case err != nil:
					if o.errs == 0 {
						o.firstErr = err.Error()
					}
					o.errs++
				default:
					o.lat = append(o.lat, lat)
				}
			}
		}()
	}
	ready.Wait()
	t0 = time.Now()
	deadline = t0.Add(d)
	close(start)
	finished.Wait()

	r := loadResult{Elapsed: time.Since(t0)}
	for _, o := range outs {
		r.OK += int64(len(o.lat))
		r.Errors += o.errs
		if r.FirstErr == "" {
			r.FirstErr = o.firstErr
		}
		r.Exhausted = r.Exhausted || o.done
		r.Latencies = append(r.Latencies, o.lat...)
	}
	slices.Sort(r.Latencies)
	return r
}

// warm opens a keep-alive connection to tgt; failures show up in the run.
func warm(ctx context.Context, c *http.Client, tgt target) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tgt.base+"/healthz", nil)
	if err != nil {
		return
	}
	resp, err := c.Do(req)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// callError says which call failed and how: the problem's status and code,
// or the transport error.
func callError(call string, err error) error {
	var p *client.Problem
	if errors.As(err, &p) {
		return fmt.Errorf("%s: status %d %s: %.200s", call, p.Status, p.Code, p.Detail)
	}
	return fmt.Errorf("%s: %w", call, err)
}

// issueRequest issues a new ledger.credit token per call and adds it to pool.
// Intents are numbered; the number picks the subject and the account. A
// positive quota makes the workload exhausted after that many issues.
func issueRequest(tgt target, pool *tokenPool, quota int64) request {
	var issued atomic.Int64
	return func(ctx context.Context, c *client.Client, _ *rand.Rand) error {
		if quota > 0 && issued.Add(1) > quota {
			return errExhausted
		}
		n := pool.seq.Add(1)
		t := spendable{
			subject: "user-" + strconv.FormatInt(n%1000, 10),
			account: "acct-" + strconv.FormatInt(n%int64(pool.accounts), 10),
		}
		out, err := c.Issue(ctx, client.IssueRequest{
			IntentID: "load-" + pool.run + "-" + strconv.FormatInt(n, 10), Operation: "ledger.credit",
			Subject: t.subject, TTLSeconds: 3600, Payload: creditPayload{Account: t.account, Amount: 1}})
		if err != nil {
			return callError("issue", err)
		}
		if out.ID == "" || out.Token == "" {
			return fmt.Errorf("issue: no token id and secret in %.200s", out.Body)
		}
		t.id, t.secret = out.ID, out.Token
		pool.add(t)
		return nil
	}
}

// creditPayload is ledger.credit's payload.
type creditPayload struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// spendRequest spends one unspent token from pool with ledger.credit of 1.
func spendRequest(tgt target, pool *tokenPool) request {
	return func(ctx context.Context, c *client.Client, _ *rand.Rand) error {
		t, ok := pool.take()
		if !ok {
			return errExhausted
		}
		out, err := c.Spend(ctx, client.SpendRequest{Token: t.secret, Operation: "ledger.credit",
			Subject: t.subject, Payload: creditPayload{Account: t.account, Amount: 1}})
		if err != nil {
			return callError("spend", err)
		}
		if out.Status != http.StatusOK {
			return fmt.Errorf("spend: stored outcome %d: %.200s", out.Status, out.Body)
		}
		return nil
	}
}

// getRequest reads a token chosen uniformly from ids.
func getRequest(tgt target, ids []string) request {
	return func(ctx context.Context, c *client.Client, rng *rand.Rand) error {
		if len(ids) == 0 {
			return errExhausted
		}
		if _, err := c.Token(ctx, ids[rng.IntN(len(ids))]); err != nil {
			return callError("get", err)
		}
		return nil
	}
}

// getAll reads every id once with c workers, untimed: it fills a cache, and
// the database's buffers, before a timed lookup run.
func getAll(ctx context.Context, tgt target, c int, ids []string) loadResult {
	var next atomic.Int64
	return runLoad(ctx, tgt, c, time.Hour, func(ctx context.Context, cl *client.Client, _ *rand.Rand) error {
		i := next.Add(1) - 1
		if i >= int64(len(ids)) {
			return errExhausted
		}
		if _, err := cl.Token(ctx, ids[i]); err != nil {
			return callError("get", err)
		}
		return nil
	})
}

// ceilingID is a path id tokend answers 404 token_not_found without any
// lookup: it has a token id's prefix and length, but 'z' is outside the
// base32hex alphabet of ids, so token.ValidID refuses it before the cache or
// Postgres is asked (httpapi getToken → lookupToken → cache.GetOrLoad and
// inspect.Get both check ValidID first). A GET of it costs what every GET
// costs without the read: HTTP, routing, authentication (from tokend's
// in-process key cache once warm) and a JSON answer.
var ceilingID = "tok_" + strings.Repeat("z", 26)

// ceilingCode is the problem code of ceilingRequest's expected answer.
const ceilingCode = "token_not_found"

// ceilingRequest reads ceilingID: the no-lookup ceiling of lookups. Only a
// 404 with code token_not_found counts as OK; anything else (a 401, a 404
// of an unknown route, a 200) is an error.
func ceilingRequest(tgt target) request {
	return func(ctx context.Context, c *client.Client, _ *rand.Rand) error {
		_, err := c.Token(ctx, ceilingID)
		if !errors.Is(err, client.ErrTokenNotFound) {
			if err == nil {
				return fmt.Errorf("get %s: found, want %s", ceilingID, ceilingCode)
			}
			return callError("get "+ceilingID, err)
		}
		return nil
	}
}
