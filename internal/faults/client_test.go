package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	tokend "github.com/tokend/tokend/client"
)

// client is one API key talking to one tokend address through the public
// client package, with its retries off: the fault tests see every answer and
// retry on their own terms (untilDefinitive).
type client struct {
	c *tokend.Client
}

func newClient(t testing.TB, base, key string) *client {
	return newClientWith(t, base, key, &http.Transport{MaxIdleConnsPerHost: 32})
}

// newClientWith uses tr, whose idle connections are closed when t ends.
func newClientWith(t testing.TB, base, key string, tr *http.Transport) *client {
	t.Cleanup(tr.CloseIdleConnections)
	c, err := tokend.New(base, key,
		tokend.WithHTTPClient(&http.Client{Transport: tr, Timeout: 15 * time.Second}),
		tokend.WithRetry(tokend.Retry{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return &client{c: c}
}

// response is one answer, or err when there was none (the connection failed,
// was cut, or the request timed out).
type response struct {
	status     int
	problem    string // the problem code of an error answer
	retryAfter string // the Retry-After of an error answer
	replay     bool
	body       []byte // a success's body as sent
	err        error
}

// answered is the response for a call's result (meta, status) or error.
func answered(m tokend.Meta, status int, err error) response {
	var p *tokend.Problem
	switch {
	case errors.As(err, &p):
		r := response{status: p.Status, problem: p.Code, body: []byte(p.Error())}
		if p.RetryAfter > 0 {
			r.retryAfter = strconv.Itoa(p.RetryAfter)
		}
		return r
	case err != nil:
		return response{err: err}
	}
	return response{status: status, replay: m.Replayed, body: m.Body}
}

// intent is what a token is issued for and spent with.
type intent struct {
	operation, subject string
	payload            string // JSON; "null" for none
}

func credit(account string, amount int) intent {
	return intent{"ledger.credit", "alice", fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount)}
}

func debit(account string, amount int) intent {
	return intent{"ledger.debit", "alice", fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount)}
}

func (c *client) issue(ctx context.Context, intentID string, in intent) response {
	return c.issueTTL(ctx, intentID, in, 600)
}

func (c *client) issueTTL(ctx context.Context, intentID string, in intent, ttlSeconds int) response {
	tok, err := c.c.Issue(ctx, tokend.IssueRequest{IntentID: intentID, Operation: in.operation,
		Subject: in.subject, TTLSeconds: ttlSeconds, Payload: json.RawMessage(in.payload)})
	if err != nil {
		return answered(tokend.Meta{}, 0, err)
	}
	return answered(tok.Meta, http.StatusCreated, nil)
}

func (c *client) spend(ctx context.Context, secret string, in intent) response {
	o, err := c.c.Spend(ctx, tokend.SpendRequest{Token: secret, Operation: in.operation,
		Subject: in.subject, Payload: json.RawMessage(in.payload)})
	if err != nil {
		return answered(tokend.Meta{}, 0, err)
	}
	return answered(o.Meta, o.Status, nil)
}

// declare declares operation name with the policy p (JSON).
func (c *client) declare(ctx context.Context, name, p string) response {
	var pol tokend.Policy
	if err := json.Unmarshal([]byte(p), &pol); err != nil {
		return response{err: err}
	}
	op, err := c.c.PutOperation(ctx, name, pol)
	if err != nil {
		return answered(tokend.Meta{}, 0, err)
	}
	return answered(op.Meta, http.StatusOK, nil)
}

// complete reports a lease holder's success on token id.
func (c *client) complete(ctx context.Context, id string, generation int64, result string) response {
	rec, err := c.c.Complete(ctx, id, tokend.Report{Generation: generation, Result: json.RawMessage(result)})
	if err != nil {
		return answered(tokend.Meta{}, 0, err)
	}
	return answered(rec.Meta, http.StatusOK, nil)
}

// issueAll issues n tokens, the i-th for intent(i) with intent ID prefix-i,
// concurrently, and fails t unless every one gets a 201.
func (c *client) issueAll(ctx context.Context, t testing.TB, prefix string, n int, intent func(i int) intent) []issued {
	t.Helper()
	toks := make([]issued, n)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range toks {
		g.Go(func() error {
			var err error
			if toks[i], err = c.issue(ctx, fmt.Sprintf("%s-%d", prefix, i), intent(i)).issued(); err != nil {
				return fmt.Errorf("issue %s-%d: %w", prefix, i, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return toks
}

// issued is the part of an issue answer the tests use.
type issued struct {
	ID    string `json:"id"`
	Token string `json:"token"`
}

// mustIssue issues one token and fails t unless it gets a 201.
func (c *client) mustIssue(ctx context.Context, t testing.TB, intentID string, in intent) issued {
	t.Helper()
	r := c.issue(ctx, intentID, in)
	tok, err := r.issued()
	if err != nil {
		t.Fatalf("issue %s: %v", intentID, err)
	}
	return tok
}

// issued decodes a 201 answer to an issue request.
func (r response) issued() (issued, error) {
	var tok issued
	if r.status != http.StatusCreated {
		return tok, fmt.Errorf("answer %s, want 201", r)
	}
	if err := json.Unmarshal(r.body, &tok); err != nil || tok.ID == "" || tok.Token == "" {
		return tok, fmt.Errorf("answer %s: no token id and secret (%v)", r, err)
	}
	return tok, nil
}

// code is the problem code of an error answer.
func (r response) code() string { return r.problem }

// state is the token state a spend answer reports.
func (r response) state() string {
	var s struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(r.body, &s)
	return s.State
}

func (r response) replayed() bool { return r.replay }

func (r response) String() string {
	if r.err != nil {
		return "no answer: " + r.err.Error()
	}
	return fmt.Sprintf("%d %s", r.status, r.body)
}

// class is how a client sorts an answer: retry it, or take it as final.
type class string

const (
	classOK          class = "ok"
	classReplayed    class = "ok, replayed"
	classFailed      class = "stored failure"
	classConnError   class = "connection error"
	classUnavailable class = "503 unavailable"
	classInProgress  class = "409 in_progress"
	classRateLimited class = "429 rate_limited"
	classUnexpected  class = "unexpected"
)

func classify(r response) class {
	switch {
	case r.err != nil:
		return classConnError
	case r.status == http.StatusServiceUnavailable:
		return classUnavailable
	case r.status == http.StatusTooManyRequests:
		return classRateLimited
	case r.status == http.StatusConflict && r.code() == "in_progress":
		return classInProgress
	case r.status >= 200 && r.status < 300 && r.replayed():
		return classReplayed
	case r.status >= 200 && r.status < 300:
		return classOK
	case r.status >= 400 && r.status < 600 && r.state() == "failed":
		return classFailed // a business failure, stored and replayed like a success
	}
	return classUnexpected
}

// retryable: the answer says nothing final, the same request may be sent again.
func (c class) retryable() bool {
	switch c {
	case classConnError, classUnavailable, classInProgress, classRateLimited:
		return true
	}
	return false
}

// The retry backoff is small, so that a recovery is measured rather than
// waited for; Retry-After is checked for, not slept.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 200 * time.Millisecond
)

// attempt is one request of a retried call, as its client saw it.
type attempt struct {
	sent       time.Time
	at         time.Time // when the answer (or the error) came
	class      class
	retryAfter string // the Retry-After header, if any
}

// untilDefinitive sends until the answer is not retryable or ctx ends, and
// returns the last answer with every attempt. When ctx ended first, the last
// answer is still retryable.
func untilDefinitive(ctx context.Context, send func(context.Context) response) (response, []attempt) {
	var attempts []attempt
	wait := minBackoff
	for {
		sent := time.Now()
		r := send(ctx)
		a := attempt{sent: sent, at: time.Now(), class: classify(r)}
		a.retryAfter = r.retryAfter
		attempts = append(attempts, a)
		if !a.class.retryable() {
			return r, attempts
		}
		select {
		case <-ctx.Done():
			return r, attempts
		case <-time.After(wait):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// tally collects the attempts of many clients.
type tally struct {
	mu       sync.Mutex
	attempts []attempt
}

func (t *tally) add(as []attempt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempts = append(t.attempts, as...)
}

// String lists the number of answers per class, most frequent first.
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := map[class]int{}
	for _, a := range t.attempts {
		n[a.class]++
	}
	classes := make([]class, 0, len(n))
	for c := range n {
		classes = append(classes, c)
	}
	slices.SortFunc(classes, func(a, b class) int { return cmp.Or(n[b]-n[a], cmp.Compare(a, b)) })
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%s %d", c, n[c])
	}
	return fmt.Sprintf("%d requests: %s", len(t.attempts), strings.Join(parts, ", "))
}

// outage is the span of retryable answers: the first and last, and how many.
type outage struct {
	first, last time.Time
	failures    int
	// without503RetryAfter counts 503 answers that lacked Retry-After.
	without503RetryAfter int
}

func (t *tally) outage() outage {
	t.mu.Lock()
	defer t.mu.Unlock()
	var o outage
	for _, a := range t.attempts {
		if !a.class.retryable() {
			continue
		}
		o.failures++
		if o.first.IsZero() || a.at.Before(o.first) {
			o.first = a.at
		}
		if a.at.After(o.last) {
			o.last = a.at
		}
		if a.class == classUnavailable && a.retryAfter == "" {
			o.without503RetryAfter++
		}
	}
	return o
}

// firstSuccessAfter is when the first final answer to a request sent after
// at came, or zero: the end of a recovery that began at or before at.
func (t *tally) firstSuccessAfter(at time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for _, a := range t.attempts {
		if a.class.retryable() || a.class == classUnexpected || !a.sent.After(at) {
			continue
		}
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
	}
	return first
}

// saw reports whether any of as is of class c.
func saw(as []attempt, c class) bool {
	return slices.ContainsFunc(as, func(a attempt) bool { return a.class == c })
}

// waitFor polls cond until it holds or ctx ends, and reports whether it held.
func waitFor(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// offset formats the time from start to at, or "never" for a zero at.
func offset(start, at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(start).Round(time.Millisecond).String()
}
