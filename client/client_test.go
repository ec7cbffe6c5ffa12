package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tokend/tokend/client"
)

// sent is one request as it left the client.
type sent struct {
	method, path, intent string
	body                 []byte
}

// wire is a RoundTripper in front of the network: it records every request
// and can lose an answer after the server handled the request.
type wire struct {
	mu    sync.Mutex
	sent  []sent
	lose  int                      // answers still to lose
	onRes func(*http.Response)     // sees each answer that is delivered
	fail  func(*http.Request) bool // drop the request before sending it
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	w.mu.Lock()
	w.sent = append(w.sent, sent{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), body})
	lose := w.lose > 0
	if lose {
		w.lose--
	}
	w.mu.Unlock()
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if lose {
		// The server handled the request; its answer never arrives.
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return nil, errors.New("connection reset by peer")
	}
	if w.onRes != nil {
		w.onRes(res)
	}
	return res, nil
}

func (w *wire) requests() []sent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sent(nil), w.sent...)
}

var fast = client.WithRetry(client.Retry{Attempts: 5, Base: time.Millisecond, Max: 10 * time.Millisecond})

func newClient(t *testing.T, url, key string, w *wire) *client.Client {
	t.Helper()
	c, err := client.New(url, key, client.WithHTTPClient(&http.Client{Transport: w}), fast)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestIssueNeedsTheCallersIntent checks that Issue never makes an intent ID
// up: without one it sends nothing.
func TestIssueNeedsTheCallersIntent(t *testing.T) {
	t.Parallel()
	w := &wire{}
	c := newClient(t, "http://127.0.0.1:1", "k", w)
	if _, err := c.Issue(t.Context(), client.IssueRequest{Operation: "ledger.credit", Subject: "u", TTLSeconds: 60}); !errors.Is(err, client.ErrNoIntent) {
		t.Errorf("Issue without an intent = %v, want ErrNoIntent", err)
	}
	if n := len(w.requests()); n != 0 {
		t.Errorf("sent %d requests, want none", n)
	}
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// TestRetryBudget: past Budget no retry starts, however many attempts are
// left; the call ends with what the server said last.
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	w := &wire{}
	c, err := client.New(ts.URL, "k", client.WithHTTPClient(&http.Client{Transport: w}),
		client.WithRetry(client.Retry{Attempts: 1000, Base: 20 * time.Millisecond, Max: 40 * time.Millisecond, Budget: 300 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stats(t.Context())
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusServiceUnavailable {
		t.Errorf("err = %v, want the 503", err)
	}
	// Waits of 10–40 ms within 300 ms: several attempts, far from 1000.
	if n := len(w.requests()); n < 3 || n > 40 {
		t.Errorf("%d attempts in a 300 ms budget", n)
	}
}
