package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTokend is a tiny stand-in for tokend's HTTP API: enough of issue,
// consume and get to drive the load generator, and strict about what it
// checks (auth, one spend per token, the subject).
type fakeTokend struct {
	mu      sync.Mutex
	n       int
	bySec   map[string]*fakeToken
	byID    map[string]*fakeToken
	intents map[string]bool
	spends  int
	doubles int // tokens spent twice: must stay 0
}

type fakeToken struct {
	id, subject string
	spent       bool
}

func newFakeTokend() *fakeTokend {
	return &fakeTokend{bySec: map[string]*fakeToken{}, byID: map[string]*fakeToken{}, intents: map[string]bool{}}
}

func (f *fakeTokend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Header.Get("Authorization") != "Bearer test-key" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/tokens":
		var body struct {
			Operation string          `json:"operation"`
			Subject   string          `json:"subject"`
			TTL       int             `json:"ttl_seconds"`
			Payload   json.RawMessage `json:"payload"`
		}
		key := r.Header.Get("Idempotency-Key")
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || key == "" || body.Operation != "ledger.credit" || body.TTL <= 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if f.intents[key] {
			http.Error(w, "intent issued twice", http.StatusConflict)
			return
		}
		f.intents[key] = true
		f.n++
		t := &fakeToken{id: fmt.Sprintf("tok_%d", f.n), subject: body.Subject}
		secret := fmt.Sprintf("tks_%d", f.n)
		f.bySec[secret], f.byID[t.id] = t, t
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"token":%q,"state":"issued"}`, t.id, secret)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/tokens/consume":
		var body struct {
			Token, Operation, Subject string
			Payload                   struct {
				Account string `json:"account"`
				Amount  int    `json:"amount"`
			}
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Payload.Amount != 1 || !strings.HasPrefix(body.Payload.Account, "acct-") {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		t := f.bySec[body.Token]
		switch {
		case t == nil:
			http.Error(w, "not found", http.StatusNotFound)
		case t.subject != body.Subject:
			http.Error(w, "binding mismatch", http.StatusForbidden)
		case t.spent:
			f.doubles++
			w.WriteHeader(http.StatusOK) // a replay; the generator must never cause one
		default:
			t.spent = true
			f.spends++
			fmt.Fprintf(w, `{"token_id":%q,"state":"consumed"}`, t.id)
		}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/tokens/"):
		if t := f.byID[strings.TrimPrefix(r.URL.Path, "/v1/tokens/")]; t != nil {
			fmt.Fprintf(w, `{"id":%q}`, t.id)
			return
		}
		http.Error(w, "not found", http.StatusNotFound)
	default:
		http.NotFound(w, r)
	}
}

func TestLoadAgainstFakeServer(t *testing.T) {
	fake := newFakeTokend()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tgt := target{base: srv.URL, key: "test-key"}
	pool := newTokenPool("t", 10)
	ctx := context.Background()

	issued := runLoad(ctx, tgt, 4, 200*time.Millisecond, issueRequest(tgt, pool, 0))
	if issued.OK == 0 || issued.Errors != 0 || issued.Exhausted {
		t.Fatalf("issue: %+v", summary(issued))
	}
	if got := pool.remaining(); int64(got) != issued.OK {
		t.Fatalf("pool holds %d tokens after %d issues", got, issued.OK)
	}
	if len(issued.Latencies) != int(issued.OK) || issued.TPS() <= 0 {
		t.Fatalf("issue: %d latencies for %d requests, tps %v", len(issued.Latencies), issued.OK, issued.TPS())
	}

	// Spend until the pool runs dry: every token exactly once.
	spent := runLoad(ctx, tgt, 4, 10*time.Second, spendRequest(tgt, pool))
	if !spent.Exhausted || spent.Errors != 0 || spent.OK != issued.OK {
		t.Fatalf("spend: %+v, want %d spends and exhaustion", summary(spent), issued.OK)
	}
	if spent.Elapsed > 5*time.Second {
		t.Fatalf("spend ran %v after the pool ran dry", spent.Elapsed)
	}
	fake.mu.Lock()
	spends, doubles := fake.spends, fake.doubles
	fake.mu.Unlock()
	if doubles != 0 || int64(spends) != issued.OK {
		t.Fatalf("server saw %d spends and %d double spends, want %d and 0", spends, doubles, issued.OK)
	}

	ids := pool.lookupIDs()
	if warm := getAll(ctx, tgt, 4, ids); warm.OK != int64(len(ids)) || warm.Errors != 0 {
		t.Fatalf("getAll: %+v, want %d", summary(warm), len(ids))
	}
	got := runLoad(ctx, tgt, 2, 100*time.Millisecond, getRequest(tgt, ids))
	if got.OK == 0 || got.Errors != 0 {
		t.Fatalf("get: %+v", summary(got))
	}

	// A quota makes pre-issuing stop by itself.
	pre := runLoad(ctx, tgt, 3, time.Hour, issueRequest(tgt, pool, 25))
	if pre.OK != 25 || !pre.Exhausted || pool.remaining() != 25 {
		t.Fatalf("pre-issue 25: %+v, pool %d", summary(pre), pool.remaining())
	}
}

func TestLoadCountsErrors(t *testing.T) {
	srv := httptest.NewServer(newFakeTokend())
	defer srv.Close()
	bad := target{base: srv.URL, key: "wrong"}
	r := runLoad(context.Background(), bad, 2, 50*time.Millisecond, getRequest(bad, []string{"tok_1"}))
	if r.OK != 0 || r.Errors == 0 || !strings.Contains(r.FirstErr, "401") {
		t.Fatalf("with a wrong key: %+v, want only errors mentioning 401", summary(r))
	}
}

// summary drops the latencies from r, for messages.
func summary(r loadResult) loadResult {
	r.Latencies = nil
	return r
}

// ceilingTokend answers like tokend a GET of ceilingID: 401 without the key,
// else 404 token_not_found. checkAuth false makes it forget the key check.
func ceilingTokend(checkAuth bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem := func(status int, code string) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"type":"/problems/%s","title":%q,"status":%d,"detail":"x","code":%q}`, code, http.StatusText(status), status, code)
		}
		switch {
		case r.URL.Path == "/healthz":
			w.WriteHeader(http.StatusOK)
		case checkAuth && r.Header.Get("Authorization") != "Bearer test-key":
			problem(http.StatusUnauthorized, "unauthorized")
		case r.Method == http.MethodGet && r.URL.Path == "/v1/tokens/"+ceilingID:
			problem(http.StatusNotFound, "token_not_found")
		default:
			http.NotFound(w, r)
		}
	})
}

func TestCeilingRequest(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(ceilingTokend(true))
	defer srv.Close()
	tgt := target{base: srv.URL, key: "test-key"}
	if r := runLoad(ctx, tgt, 2, 100*time.Millisecond, ceilingRequest(tgt)); r.OK == 0 || r.Errors != 0 {
		t.Fatalf("ceiling: %+v, want only OKs", summary(r))
	}
	bad := target{base: srv.URL, key: "wrong"}
	if r := runLoad(ctx, bad, 1, 50*time.Millisecond, ceilingRequest(bad)); r.OK != 0 || !strings.Contains(r.FirstErr, "401") {
		t.Fatalf("ceiling with a wrong key: %+v, want only 401 errors", summary(r))
	}
	// A 404 that is not token_not_found (a route tokend does not have, say)
	// is an error.
	fake := httptest.NewServer(newFakeTokend())
	defer fake.Close()
	other := target{base: fake.URL, key: "test-key"}
	if r := runLoad(ctx, other, 1, 50*time.Millisecond, ceilingRequest(other)); r.OK != 0 || !strings.Contains(r.FirstErr, "404") {
		t.Fatalf("ceiling on a plain 404: %+v, want only errors", summary(r))
	}
}

func TestProbeCeiling(t *testing.T) {
	noAuth := httptest.NewServer(ceilingTokend(false))
	defer noAuth.Close()
	fake := httptest.NewServer(newFakeTokend())
	defer fake.Close()
	good := httptest.NewServer(ceilingTokend(true))
	defer good.Close()
	for _, tc := range []struct {
		base, note string
		ok         bool
	}{
		{good.URL, "", true},
		{noAuth.URL, "wrong key: status 404", false},
		{fake.URL, "status 404", false},
	} {
		b := &bench{svc: &target{base: tc.base, key: "test-key"}, res: &Results{}}
		b.probeCeiling()
		notes := strings.Join(b.res.Notes, "\n")
		if b.ceiling != tc.ok || !strings.Contains(notes, tc.note) || (tc.ok != (notes == "")) {
			t.Errorf("%s: ceiling %v, notes %q; want %v and a note with %q", tc.base, b.ceiling, notes, tc.ok, tc.note)
		}
	}
}

func TestProbePprof(t *testing.T) {
	debug := http.NewServeMux()
	debug.HandleFunc("/debug/pprof/", pprof.Index)
	withPprof := httptest.NewServer(debug)
	defer withPprof.Close()
	api := httptest.NewServer(newFakeTokend()) // an API address: no profiler there
	defer api.Close()
	for _, tc := range []struct {
		url, note string
		ok        bool
	}{
		{withPprof.URL, "", true},
		{"", "no -pprof-url", false},
		{api.URL, "serves no /debug/pprof/ (status 401", false},
	} {
		b := &bench{cfg: Config{PprofURL: tc.url}, svc: &target{base: api.URL}, res: &Results{}}
		b.probePprof(context.Background())
		if b.pprof != tc.ok || !strings.Contains(b.res.Profile, tc.note) || tc.ok != (b.res.Profile == "") ||
			!tc.ok && !strings.Contains(b.res.Profile, "TOKEND_DEBUG_LISTEN") {
			t.Errorf("-pprof-url %q: pprof %v, note %q; want %v and a note with %q", tc.url, b.pprof, b.res.Profile, tc.ok, tc.note)
		}
	}
}

// TestLoadSendsEachCallOnce: a request the server drops without an answer
// is one error of the run, not retried behind its back, which would hide
// what the run measures.
func TestLoadSendsEachCallOnce(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		hits.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	tgt := target{base: srv.URL, key: "test-key"}
	r := runLoad(context.Background(), tgt, 1, 100*time.Millisecond, getRequest(tgt, []string{"tok_1"}))
	if r.OK != 0 || r.Errors == 0 || hits.Load() != r.Errors {
		t.Fatalf("%+v with %d requests served: want as many errors as requests", summary(r), hits.Load())
	}
}
