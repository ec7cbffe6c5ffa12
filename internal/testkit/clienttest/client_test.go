package clienttest_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/serve/ledgerapi"
	"github.com/tokend/tokend/internal/testkit/contract"
	"github.com/tokend/tokend/internal/testkit/tokentest"
)

// tokend is a real tokend on a fresh database, every exchange checked
// against the OpenAPI document, with acme's client and operator keys.
type tokend struct {
	pool           *pgxpool.Pool
	url            string
	client, op     string // API keys
	clientOfGlobex string
}

func newTokend(t *testing.T) *tokend {
	t.Helper()
	pool := ledgertest.NewPool(t)
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	srv, err := httpapi.New(httpapi.Config{
		Pool: pool, Issuer: k.Issuer, Spender: k.Spender,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mounts: []httpapi.Mount{ledgerapi.Mount(pool)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(contract.Handler(t, srv))
	t.Cleanup(ts.Close)
	key := func(tenant string, role apikey.Role) string {
		_, secret, err := apikey.Create(context.Background(), pool, tenant, role)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	return &tokend{pool: pool, url: ts.URL, client: key("acme", apikey.Client), op: key("acme", apikey.Operator), clientOfGlobex: key("globex", apikey.Client)}
}

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

// TestRetryAfterLostAnswerReplays loses the answer of an issue and of a
// spend after tokend handled them: the client's retry gets the replay, with
// the same Idempotency-Key and the same body bytes, and the account is
// credited once.
func TestRetryAfterLostAnswerReplays(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	w := &wire{lose: 1}
	c := newClient(t, srv.url, srv.client, w)
	ctx := t.Context()

	tok, err := c.Issue(ctx, client.IssueRequest{IntentID: "order-1", Operation: "ledger.credit", Subject: "user-1", TTLSeconds: 60,
		Payload: map[string]any{"account": "acct-1", "amount": 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Replayed {
		t.Errorf("issue after a lost answer: Replayed = false, want the replay of the first attempt")
	}
	w.lose = 1
	out, err := c.Spend(ctx, client.SpendRequest{Token: tok.Token, Operation: "ledger.credit", Subject: "user-1",
		Payload: map[string]any{"account": "acct-1", "amount": 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Replayed || out.Status != http.StatusOK || out.State != client.Consumed {
		t.Errorf("spend after a lost answer = %+v, want the replayed 200 consumed", out)
	}
	acct, err := c.Account(ctx, "acct-1")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != 5 {
		t.Errorf("balance = %d, want 5: one effect for two deliveries", acct.Balance)
	}
	reqs := w.requests()
	if len(reqs) != 5 {
		t.Fatalf("sent %d requests, want 5 (issue twice, spend twice, read)", len(reqs))
	}
	for _, pair := range [][2]sent{{reqs[0], reqs[1]}, {reqs[2], reqs[3]}} {
		if pair[0].path != pair[1].path || pair[0].intent != pair[1].intent || !bytes.Equal(pair[0].body, pair[1].body) {
			t.Errorf("a retry differs from its first attempt:\n%+v\n%+v", pair[0], pair[1])
		}
	}
	if reqs[0].intent != "order-1" {
		t.Errorf("Idempotency-Key = %q, want the caller's intent ID", reqs[0].intent)
	}
}

// leaseOp declares pay.card in lease mode with a short lease.
func leaseOp(t *testing.T, srv *tokend) {
	t.Helper()
	op, err := client.New(srv.url, srv.op)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.PutOperation(t.Context(), "pay.card", client.Policy{Mode: "lease", OnLeaseExpiry: "unknown", LeaseSeconds: 2}); err != nil {
		t.Fatal(err)
	}
}

func leased(t *testing.T, c *client.Client, intentID string) (*client.IssuedToken, *client.Lease) {
	t.Helper()
	tok, err := c.Issue(t.Context(), client.IssueRequest{IntentID: intentID, Operation: "pay.card", Subject: "user-1", TTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Spend(t.Context(), client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"})
	if err != nil {
		t.Fatal(err)
	}
	if out.Lease == nil || out.Status != http.StatusAccepted || out.State != client.Pending {
		t.Fatalf("lease spend = %+v, want a lease", out)
	}
	return tok, out.Lease
}

// TestInProgressResolvesIntoTheReplay spends a token another holder is
// executing: tokend answers 409 in_progress, the holder completes, and the
// client's retry gets the stored outcome.
func TestInProgressResolvesIntoTheReplay(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	leaseOp(t, srv)
	holder := newClient(t, srv.url, srv.client, &wire{})
	tok, lease := leased(t, holder, "order-1")
	if lease.Generation != 1 || lease.OperationID == "" || lease.ExpiresAt.IsZero() {
		t.Errorf("lease = %+v", lease)
	}

	var once sync.Once
	w := &wire{}
	w.onRes = func(res *http.Response) {
		if res.StatusCode == http.StatusConflict {
			once.Do(func() {
				if _, err := lease.Complete(context.Background(), 0, map[string]string{"charge": "ch_1"}); err != nil {
					t.Errorf("complete: %v", err)
				}
			})
		}
	}
	c := newClient(t, srv.url, srv.client, w)
	out, err := c.Spend(t.Context(), client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Replayed || out.State != client.Consumed || string(out.Result) != `{"charge":"ch_1"}` {
		t.Errorf("spend = %+v %s, want the replayed outcome the holder completed", out, out.Result)
	}
	if n := len(w.requests()); n != 2 {
		t.Errorf("sent %d requests, want 2: one in progress, one replay", n)
	}
}

// TestOutcomeUnknownIsNotRetried checks that a spend of a token whose
// outcome is unknown is sent once and comes back as ErrOutcomeUnknown.
func TestOutcomeUnknownIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	leaseOp(t, srv)
	holder := newClient(t, srv.url, srv.client, &wire{})
	tok, lease := leased(t, holder, "order-1")
	rec, err := lease.Unknown(t.Context())
	if err != nil || rec.State != client.Unknown || rec.Generation != lease.Generation {
		t.Fatalf("Unknown = %+v, %v", rec, err)
	}

	w := &wire{}
	c := newClient(t, srv.url, srv.client, w)
	_, err = c.Spend(t.Context(), client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"})
	var p *client.Problem
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &p) || p.Status != http.StatusConflict || p.RequestID == "" {
		t.Fatalf("spend = %v, want a 409 outcome_unknown problem with its request id", err)
	}
	if !strings.Contains(err.Error(), "reconcile") {
		t.Errorf("error %q does not tell the caller to wait for reconciliation", err)
	}
	if n := len(w.requests()); n != 1 {
		t.Errorf("sent %d requests, want 1: an unknown outcome is never retried", n)
	}
}

// TestLease drives a lease with its helpers: each report quotes the lease's
// generation, the same report again is a replay, and a later spend replays
// the recorded outcome.
func TestLease(t *testing.T) {
	t.Parallel()
	srv := newTokend(t)
	leaseOp(t, srv)
	c := newClient(t, srv.url, srv.client, &wire{})
	ctx := t.Context()

	tok, lease := leased(t, c, "order-1")
	rec, err := lease.Fail(ctx, http.StatusPaymentRequired, map[string]string{"reason": "declined"})
	if err != nil || rec.Replayed || rec.State != client.Failed || rec.Status != http.StatusPaymentRequired || rec.Generation != lease.Generation {
		t.Fatalf("Fail = %+v, %v", rec, err)
	}
	if rec, err := lease.Fail(ctx, http.StatusPaymentRequired, map[string]string{"reason": "declined"}); err != nil || !rec.Replayed {
		t.Errorf("Fail again = %+v, %v, want the replay", rec, err)
	}
	if _, err := lease.Complete(ctx, 0, nil); !errors.Is(err, client.ErrReportConflict) {
		t.Errorf("Complete after Fail = %v, want ErrReportConflict", err)
	}
	out, err := c.Spend(ctx, client.SpendRequest{Token: tok.Token, Operation: "pay.card", Subject: "user-1"})
	if err != nil || !out.Replayed || out.Status != http.StatusPaymentRequired || out.State != client.Failed || string(out.Error) != `{"reason":"declined"}` {
		t.Errorf("spend after Fail = %+v, %v, want the stored 402 failure replayed", out, err)
	}
	got, err := c.Token(ctx, tok.ID)
	if err != nil || got.State != client.Failed || got.Generation != lease.Generation {
		t.Errorf("Token = %+v, %v", got, err)
	}
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// TestDefaultRetryRidesOutARestart: tokend goes away for 3 s (its listener
// closed: connections refused, as during a restart) right before a spend.
// With the default policy the spend is answered once tokend is back, every
// attempt the same bytes, and the account is credited once. The policy of
// before (5 attempts, about 0.75 s of waits) gave up while it was down.
func TestDefaultRetryRidesOutARestart(t *testing.T) {
	t.Parallel()
	pool := ledgertest.NewPool(t)
	k := ledgertest.New(t, tokentest.Options{Pool: pool})
	srv, err := httpapi.New(httpapi.Config{
		Pool: pool, Issuer: k.Issuer, Spender: k.Spender,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Mounts: []httpapi.Mount{ledgerapi.Mount(pool)},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := contract.Handler(t, srv)
	_, key, err := apikey.Create(t.Context(), pool, "acme", apikey.Client)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := &http.Server{Handler: h}
	go first.Serve(ln)
	w := &wire{}
	c, err := client.New("http://"+addr, key, client.WithHTTPClient(&http.Client{Transport: w}))
	if err != nil {
		t.Fatal(err)
	}
	payload := map[string]any{"account": "acct-r", "amount": 7}
	tok, err := c.Issue(t.Context(), client.IssueRequest{IntentID: "restart-1", Operation: "ledger.credit", Subject: "u", TTLSeconds: 600, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}

	const down = 3 * time.Second
	first.Close()
	began := time.Now()
	back := make(chan *http.Server, 1)
	go func() {
		time.Sleep(down)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			back <- nil
			return
		}
		second := &http.Server{Handler: h}
		back <- second
		_ = second.Serve(ln)
	}()
	t.Cleanup(func() {
		if s := <-back; s != nil {
			s.Close()
		}
	})
	before := len(w.requests())
	out, err := c.Spend(t.Context(), client.SpendRequest{Token: tok.Token, Operation: "ledger.credit", Subject: "u", Payload: payload})
	if err != nil {
		t.Fatalf("spend across a %s restart: %v (after %s)", down, err, time.Since(began))
	}
	if out.Status != http.StatusOK || out.State != client.Consumed {
		t.Errorf("spend = %+v", out)
	}
	if took := time.Since(began); took < down {
		t.Errorf("answered after %s, before tokend was back", took)
	}
	reqs := w.requests()[before:]
	if len(reqs) < 2 {
		t.Fatalf("%d attempts, want retries", len(reqs))
	}
	for _, r := range reqs[1:] {
		if r.path != reqs[0].path || !bytes.Equal(r.body, reqs[0].body) {
			t.Errorf("a retry differs from the first attempt:\n%+v\n%+v", reqs[0], r)
		}
	}
	acct, err := c.Account(t.Context(), "acct-r")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != 7 {
		t.Errorf("balance = %d, want 7: one effect", acct.Balance)
	}
}
