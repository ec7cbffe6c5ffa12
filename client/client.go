// Package client is the Go client of tokend's REST API, for backends and for
// tokend's own tools.
//
// It is bound to intents: Issue needs the caller's intent ID and never makes
// one up, and every retry of one call sends the same Idempotency-Key and the
// same body bytes. It retries, within a time budget (15 s by default, so a
// restart or a rolling deploy of several seconds is ridden out), with
// exponential backoff and jitter and honouring Retry-After, what is safe and
// transient: network errors before an answer (a connection refused while
// tokend restarts), 409 in_progress, 429, 502, 503 and 504.
// It never retries other answers, and in particular not 409 outcome_unknown:
// that outcome is for an operator to reconcile, so it comes back as an error
// matching ErrOutcomeUnknown.
//
// Every error answer is a *Problem that matches the sentinel of its code
// with errors.Is. Every result says whether tokend replayed it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxResponseBytes bounds an answer read into memory: a full page of tokens
// with large stored results stays well below it.
const maxResponseBytes = 32 << 20

// Client calls one tokend with one API key. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/prefix], without a trailing slash
	key       string
	http      *http.Client
	retry     Retry
	userAgent string
	onRetry   func(RetryEvent)
}

// Retry bounds the retries of one call.
type Retry struct {
	// Attempts is how many times one call is sent at most, the first
	// included; 1 turns retries off.
	Attempts int
	// Base is the first backoff; each retry doubles it, up to Max. The wait
	// is drawn at random between half the backoff and the backoff (equal
	// jitter: spread, yet always a wait, so that a server restarting is
	// given time), or is the answer's Retry-After when that is longer.
	Base, Max time.Duration
	// Budget bounds the time from the call's first attempt after which no
	// retry starts: a wait that would end past it is not begun. Zero means
	// no bound but Attempts (and the call's context).
	Budget time.Duration
}

// DefaultRetry is the retry policy of a Client made without WithRetry: up
// to 15 s of retries, 100 ms doubling to 2 s between them, so that a call
// made while tokend restarts (1–2 s here, more under a rolling deploy
// behind a balancer) is answered once it is back. The waits alone add up
// to at least 7 s over the first 12 attempts.
var DefaultRetry = Retry{Attempts: 30, Base: 100 * time.Millisecond, Max: 2 * time.Second, Budget: 15 * time.Second}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends the requests through hc instead of a client of the
// Client's own. Its Timeout, if any, bounds each attempt; a call's context
// bounds the whole call, retries included.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithRetry replaces DefaultRetry.
func WithRetry(r Retry) Option { return func(c *Client) { c.retry = r } }

// RetryEvent tells a WithRetryNotify callback about a retry about to wait.
type RetryEvent struct {
	Method, Path string
	// Attempt is the number of the attempt that failed, from 1.
	Attempt int
	// Err is what it failed with: a transport error or a *Problem.
	Err error
	// Wait is the backoff before the next attempt; Budget what is left of
	// the retry budget (zero when unbounded).
	Wait, Budget time.Duration
}

// WithRetryNotify calls f before each wait between two attempts, so that a
// command line tool can say it is retrying instead of staying silent.
func WithRetryNotify(f func(RetryEvent)) Option { return func(c *Client) { c.onRetry = f } }

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a Client of the tokend at baseURL (such as
// http://127.0.0.1:8080) that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("client: an API key is required")
	}
	c := &Client{
		base:      strings.TrimRight(baseURL, "/"),
		key:       apiKey,
		http:      &http.Client{Timeout: 2 * time.Minute},
		retry:     DefaultRetry,
		userAgent: "tokend-go-client",
	}
	for _, o := range opts {
		o(c)
	}
	c.retry.Attempts = max(c.retry.Attempts, 1)
	return c, nil
}

// call is one API call: what to send, the same bytes on every attempt.
type call struct {
	method, path string
	query        url.Values
	body         []byte // nil: no body
	header       http.Header
}

// answer is a 2xx answer, read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) meta() Meta {
	return Meta{Replayed: a.header.Get("Idempotent-Replayed") == "true", RequestID: a.header.Get("X-Request-Id"), Body: a.body}
}

// newCall marshals body once: every attempt sends these bytes.
func newCall(method, path string, body any) (call, error) {
	c := call{method: method, path: path, header: http.Header{}}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return call{}, fmt.Errorf("client: %s %s: encode the body: %w", method, path, err)
		}
		c.body = b
	}
	return c, nil
}

// do sends cl, retrying what may be retried, and returns its answer when
// accept says it is one (a 2xx, or more for a spend); anything else is a
// *Problem or a transport error.
func (c *Client) do(ctx context.Context, cl call, accept func(answer) bool) (answer, error) {
	var last error
	start := time.Now()
	for attempt := 0; ; attempt++ {
		a, err, wait, retry := c.attempt(ctx, cl, accept)
		if !retry || attempt+1 >= c.retry.Attempts {
			return a, err
		}
		last = err
		d := c.backoff(attempt, wait)
		if c.retry.Budget > 0 && time.Since(start)+d > c.retry.Budget {
			return answer{}, last // out of budget: what the server said last
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			// The wait would outlast the caller's deadline: give up now
			// with what the server said.
			return answer{}, last
		}
		if c.onRetry != nil {
			var left time.Duration
			if c.retry.Budget > 0 {
				left = c.retry.Budget - time.Since(start)
			}
			c.onRetry(RetryEvent{Method: cl.method, Path: cl.path, Attempt: attempt + 1, Err: err, Wait: d, Budget: left})
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return answer{}, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// attempt sends cl once. retry says whether another attempt may help, and
// wait is the Retry-After the server asked for.
func (c *Client) attempt(ctx context.Context, cl call, accept func(answer) bool) (a answer, err error, wait time.Duration, retry bool) {
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return answer{}, err, 0, false
	}
	for k, vs := range cl.header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// No answer came: whether the server acted or not, the same
		// request again is safe (intent, token and generation make every
		// call idempotent), unless the caller gave up.
		return answer{}, err, 0, ctx.Err() == nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	switch {
	case err != nil:
		return answer{}, fmt.Errorf("client: %s %s: read the answer: %w", cl.method, req.URL.Redacted(), err), 0, false
	case len(b) > maxResponseBytes:
		return answer{}, fmt.Errorf("client: %s %s: the answer is over %d bytes", cl.method, req.URL.Redacted(), maxResponseBytes), 0, false
	}
	a = answer{status: resp.StatusCode, header: resp.Header, body: b}
	if accept(a) {
		return a, nil, 0, false
	}
	p := problemOf(resp, b)
	return answer{}, p, time.Duration(p.RetryAfter) * time.Second, retryable(resp, p)
}

// retryable reports whether the error answer p may be sent again: the
// statuses of a busy or unreachable server, and a token another holder is
// executing. An unknown outcome is not among them: no retry can settle it.
func retryable(resp *http.Response, p *Problem) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return p.Code == "in_progress"
	}
	return false
}

// backoff is the wait before retry attempt+1: equal jitter over an
// exponential bound (from half the bound to the bound), or the server's
// Retry-After when that is longer.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	bound := c.retry.Base << min(attempt, 30)
	if bound <= 0 || (c.retry.Max > 0 && bound > c.retry.Max) {
		bound = c.retry.Max
	}
	var d time.Duration
	if bound > 0 {
		d = bound/2 + rand.N(bound/2+1)
	}
	return max(d, retryAfter)
}

// retryAfterSeconds parses a Retry-After header: seconds or an HTTP date.
func retryAfterSeconds(v string) int {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, int(time.Until(t).Seconds()+0.999))
	}
	return 0
}

// ok accepts the 2xx answers.
func ok(a answer) bool { return a.status/100 == 2 }

// isJSON reports whether a is application/json, as opposed to a problem or
// a proxy's page.
func isJSON(a answer) bool {
	mt, _, err := mime.ParseMediaType(a.header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// decode reads a's JSON body into v.
func decode(cl call, a answer, v any) error {
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("client: %s %s: decode the answer: %w", cl.method, cl.path, err)
	}
	return nil
}

// get and send are a call whose 2xx answer is decoded into out.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body, out any) (Meta, error) {
	cl, err := newCall(method, path, body)
	if err != nil {
		return Meta{}, err
	}
	cl.query = query
	a, err := c.do(ctx, cl, ok)
	if err != nil {
		return Meta{}, err
	}
	return a.meta(), decode(cl, a, out)
}

func esc(s string) string { return url.PathEscape(s) }
