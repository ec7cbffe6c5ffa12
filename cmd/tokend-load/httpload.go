package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
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

// request performs one request of a workload with the run's client and the
// worker's random source. It returns errExhausted when there is nothing left
// to do. A request in flight does not end with the run's context; the
// client's 30 s timeouts bound it.
type request func(a *api, rng *rand.Rand) error

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

// runLoad runs req in c workers for d (until ctx ends, or until the workload
// is exhausted). Before the clock starts every worker opens its connection
// with an untimed GET /healthz, so the run measures requests, not dials.
func runLoad(ctx context.Context, tgt target, c int, d time.Duration, req request) loadResult {
	a, err := newAPI(tgt, c)
	if err != nil {
		return loadResult{Errors: 1, FirstErr: err.Error()}
	}
	defer a.close()

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
			_, _ = a.do(fasthttp.MethodGet, "/healthz", nil) // failures show up in the run
			ready.Done()
			<-start
			for time.Now().Before(deadline) && ctx.Err() == nil {
				s := time.Now()
				err := req(a, rng)
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

// issueRequest issues a new ledger.credit token per call and adds it to pool.
// Intents are numbered; the number picks the subject and the account. A
// positive quota makes the workload exhausted after that many issues.
func issueRequest(tgt target, pool *tokenPool, quota int64) request {
	var issued atomic.Int64
	return func(a *api, _ *rand.Rand) error {
		if quota > 0 && issued.Add(1) > quota {
			return errExhausted
		}
		n := pool.seq.Add(1)
		t := spendable{
			subject: "user-" + strconv.FormatInt(n%1000, 10),
			account: "acct-" + strconv.FormatInt(n%int64(pool.accounts), 10),
		}
		body, err := json.Marshal(issueBody{Operation: "ledger.credit", Subject: t.subject, TTLSeconds: 3600,
			Payload: creditPayload{Account: t.account, Amount: 1}})
		if err != nil {
			return err
		}
		ans, err := a.do(fasthttp.MethodPost, "/v1/tokens", body, "Idempotency-Key", "load-"+pool.run+"-"+strconv.FormatInt(n, 10))
		if err != nil {
			return fmt.Errorf("issue: %w", err)
		}
		if body, err = ans.expect("issue", http.StatusCreated); err != nil {
			return err
		}
		var out struct{ ID, Token string }
		if err := json.Unmarshal(body, &out); err != nil || out.ID == "" || out.Token == "" {
			return fmt.Errorf("issue: no token id and secret in %.200s", body)
		}
		t.id, t.secret = out.ID, out.Token
		pool.add(t)
		return nil
	}
}

// issueBody and spendBody are the JSON bodies of an issue and a spend.
type issueBody struct {
	Operation  string        `json:"operation"`
	Subject    string        `json:"subject"`
	TTLSeconds int           `json:"ttl_seconds"`
	Payload    creditPayload `json:"payload"`
}

type spendBody struct {
	Token     string        `json:"token"`
	Operation string        `json:"operation"`
	Subject   string        `json:"subject"`
	Payload   creditPayload `json:"payload"`
}

// creditPayload is ledger.credit's payload.
type creditPayload struct {
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// spendRequest spends one unspent token from pool with ledger.credit of 1.
func spendRequest(tgt target, pool *tokenPool) request {
	return func(a *api, _ *rand.Rand) error {
		t, ok := pool.take()
		if !ok {
			return errExhausted
		}
		body, err := json.Marshal(spendBody{Token: t.secret, Operation: "ledger.credit", Subject: t.subject,
			Payload: creditPayload{Account: t.account, Amount: 1}})
		if err != nil {
			return err
		}
		ans, err := a.do(fasthttp.MethodPost, "/v1/tokens/consume", body)
		if err != nil {
			return fmt.Errorf("spend: %w", err)
		}
		_, err = ans.expect("spend", http.StatusOK)
		return err
	}
}

// getRequest reads a token chosen uniformly from ids.
func getRequest(tgt target, ids []string) request {
	return func(a *api, rng *rand.Rand) error {
		if len(ids) == 0 {
			return errExhausted
		}
		return getToken(a, ids[rng.IntN(len(ids))])
	}
}

// getToken reads one token, which must be found.
func getToken(a *api, id string) error {
	ans, err := a.do(fasthttp.MethodGet, "/v1/tokens/"+url.PathEscape(id), nil)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	_, err = ans.expect("get", http.StatusOK)
	return err
}

// getAll reads every id once with c workers, untimed: it fills a cache, and
// the database's buffers, before a timed lookup run.
func getAll(ctx context.Context, tgt target, c int, ids []string) loadResult {
	var next atomic.Int64
	return runLoad(ctx, tgt, c, time.Hour, func(a *api, _ *rand.Rand) error {
		i := next.Add(1) - 1
		if i >= int64(len(ids)) {
			return errExhausted
		}
		return getToken(a, ids[i])
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
	return func(a *api, _ *rand.Rand) error {
		ans, err := a.do(fasthttp.MethodGet, "/v1/tokens/"+ceilingID, nil)
		if err != nil {
			return fmt.Errorf("get %s: %w", ceilingID, err)
		}
		switch code, _ := ans.problem(); {
		case ans.status == http.StatusNotFound && code == ceilingCode:
			return nil
		case ans.status == http.StatusOK:
			return fmt.Errorf("get %s: found, want %s", ceilingID, ceilingCode)
		case ans.status == http.StatusNotFound:
			return fmt.Errorf("get %s: status 404 without code %s: %.200s", ceilingID, ceilingCode, ans.body)
		}
		_, err = ans.expect("get "+ceilingID, http.StatusNotFound)
		return err
	}
}
