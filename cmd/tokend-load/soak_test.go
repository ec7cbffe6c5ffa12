package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// steadyWindow is a window of a healthy soak: every kind seen, no error.
func steadyWindow(i int, endS float64) SoakWindow {
	w := SoakWindow{Index: i, StartS: endS - 60, EndS: endS, Kinds: map[string]KindStats{},
		TokendCPUUs: 1000, PgCPUUs: 2000, RSSKB: 50_000, Goroutines: 100,
		Tables: []TableSize{{Name: "tokens", Bytes: 10 << 20}, {Name: "token_events", Bytes: 20 << 20},
			{Name: "ledger_entries", Bytes: 5 << 20}}}
	for _, k := range append(append([]string{}, requestKinds...), lagKinds...) {
		w.Kinds[k] = KindStats{Count: 100, P50: 2, P99: 20}
	}
	return w
}

func TestJudgeSoak(t *testing.T) {
	// horizon: 120 + 60 + 60 + 2×10 = 260 s, so window 5 (ends at 300 s) is the reference.
	cfg := SoakConfig{PID: 1, PgPID: 2, TTLSeconds: 120, RetentionS: 60, EventRetentionS: 60, SweepIntervalS: 10}
	soak := func(n int, change func(ws []SoakWindow)) []SoakWindow {
		ws := make([]SoakWindow, n)
		for i := range ws {
			ws[i] = steadyWindow(i+1, float64(60*(i+1)))
		}
		if change != nil {
			change(ws)
		}
		return ws
	}
	last := func(ws []SoakWindow) *SoakWindow { return &ws[len(ws)-1] }
	for _, tc := range []struct {
		name   string
		cfg    SoakConfig
		ws     []SoakWindow
		failed []string // the criteria that must fail; all others must pass
	}{
		{"steady", cfg, soak(8, nil), nil},
		// The first window's cold start is not judged.
		{"cold first window", cfg, soak(8, func(ws []SoakWindow) {
			ws[0].PgCPUUs, ws[0].TokendCPUUs = 9000, 9000
			ws[0].Kinds[kindSpend] = KindStats{Count: 10, P99: 900}
		}), nil},
		// Until the horizon the tables fill and the sweeper has nothing to
		// delete: CPU and p99 are judged against window 6, the first that
		// starts past it (300 s), not the second.
		{"cost rises while the tables fill", cfg, soak(8, func(ws []SoakWindow) {
			for i := 1; i < 5; i++ {
				ws[i].PgCPUUs, ws[i].TokendCPUUs = 1500, 700
				ws[i].Kinds[kindSpend] = KindStats{Count: 100, P99: 10}
			}
		}), nil},
		{"CPU grows past the horizon", cfg, soak(8, func(ws []SoakWindow) { ws[5].PgCPUUs = 1800 }), []string{"Postgres CPU/op"}},
		{"p99 grows past the horizon", cfg, soak(8, func(ws []SoakWindow) {
			ws[5].Kinds[kindIssue] = KindStats{Count: 100, P99: 15}
		}), []string{"p99 issue"}},
		{"CPU at the mark", cfg, soak(8, func(ws []SoakWindow) { last(ws).PgCPUUs = 2200 }), nil},
		{"Postgres CPU grows", cfg, soak(8, func(ws []SoakWindow) { last(ws).PgCPUUs = 2201 }), []string{"Postgres CPU/op"}},
		{"tokend CPU grows", cfg, soak(8, func(ws []SoakWindow) { last(ws).TokendCPUUs = 1500 }), []string{"tokend CPU/op"}},
		{"CPU not measured", SoakConfig{TTLSeconds: 120, RetentionS: 60, EventRetentionS: 60, SweepIntervalS: 10},
			soak(8, nil), []string{"tokend CPU/op", "Postgres CPU/op", "RSS flat"}},
		{"p99 at the mark", cfg, soak(8, func(ws []SoakWindow) { last(ws).Kinds[kindGet] = KindStats{Count: 100, P99: 25} }), nil},
		{"p99 of spend grows", cfg, soak(8, func(ws []SoakWindow) {
			last(ws).Kinds[kindSpend] = KindStats{Count: 100, P99: 25.1}
		}), []string{"p99 spend"}},
		{"a kind missing in the last window", cfg, soak(8, func(ws []SoakWindow) {
			last(ws).Kinds[kindRevoke] = KindStats{}
		}), []string{"p99 revoke", "every kind"}},
		{"no webhook in one window", cfg, soak(8, func(ws []SoakWindow) {
			ws[3].Kinds[kindWebhook] = KindStats{}
		}), []string{"every kind"}},
		// Before the horizon RSS may grow (warm-up); after it, not.
		{"RSS grows in warm-up", cfg, soak(8, func(ws []SoakWindow) { ws[1].RSSKB, ws[2].RSSKB = 20_000, 30_000 }), nil},
		{"RSS grows after warm-up", cfg, soak(8, func(ws []SoakWindow) { last(ws).RSSKB = 55_001 }), []string{"RSS flat"}},
		{"goroutines leak", cfg, soak(8, func(ws []SoakWindow) { last(ws).Goroutines = 121 }), []string{"goroutines flat"}},
		{"goroutines within slack", cfg, soak(8, func(ws []SoakWindow) { last(ws).Goroutines = 120 }), nil},
		{"goroutines follow open connections", cfg, soak(8, func(ws []SoakWindow) { last(ws).Goroutines, last(ws).Conns = 400, 300 }), nil},
		{"goroutines grow past the connections", cfg, soak(8, func(ws []SoakWindow) { last(ws).Goroutines, last(ws).Conns = 400, 200 }), []string{"goroutines flat"}},
		{"tables grow past the horizon", cfg, soak(8, func(ws []SoakWindow) {
			last(ws).Tables = []TableSize{{Name: "tokens", Bytes: 13 << 20}, {Name: "token_events", Bytes: 24 << 20}}
		}), []string{"tables bounded"}},
		// The example ledger grows with every credit by design: not judged.
		{"ledger grows", cfg, soak(8, func(ws []SoakWindow) {
			last(ws).Tables = append(last(ws).Tables[:2:2], TableSize{Name: "ledger_entries", Bytes: 500 << 20})
		}), nil},
		{"tables grow before the horizon", cfg, soak(8, func(ws []SoakWindow) { ws[0].Tables = ws[0].Tables[:1] }), nil},
		{"one error", cfg, soak(8, func(ws []SoakWindow) {
			ws[4].Kinds[kindFeed] = KindStats{Count: 100, Errors: 1, FirstErr: "feed: status 500"}
		}), []string{"zero errors"}},
		{"too short for the horizon", cfg, soak(4, nil), []string{"RSS flat", "goroutines flat", "tables bounded"}},
		{"too few windows", cfg, soak(2, nil), []string{"windows", "RSS flat", "goroutines flat", "tables bounded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeSoak(tc.cfg, tc.ws)
			var failed []string
			for _, c := range v.Criteria {
				if !c.Pass {
					failed = append(failed, c.Name)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tc.failed, ",") || v.Pass != (len(tc.failed) == 0) {
				t.Errorf("failed %q (pass %v), want %q\n%+v", failed, v.Pass, tc.failed, v.Criteria)
			}
		})
	}
}

func TestSoakPools(t *testing.T) {
	var f fifo
	old := time.Now().Add(-time.Minute)
	f.add(soakToken{id: "a", at: old})
	f.add(soakToken{id: "b", at: time.Now()})
	f.add(soakToken{id: "c", at: time.Now()})
	// The old one is left to expire; the others go out once each, oldest first.
	for _, want := range []string{"b", "c"} {
		if got, ok := f.take(30 * time.Second); !ok || got.id != want {
			t.Fatalf("take = %q %v, want %q", got.id, ok, want)
		}
	}
	if _, ok := f.take(30 * time.Second); ok || f.len() != 0 {
		t.Fatalf("take from an empty fifo succeeded, or %d left", f.len())
	}

	var r recent
	if _, ok := r.pick(time.Minute); ok {
		t.Fatal("pick from an empty ring")
	}
	for i := range 300 {
		r.add(soakToken{id: strconv.Itoa(i), at: time.Now()})
	}
	for range 50 {
		got, ok := r.pick(time.Minute)
		if n, _ := strconv.Atoi(got.id); !ok || n < 300-len(r.ring) {
			t.Fatalf("pick = %q %v, want one of the latest %d", got.id, ok, len(r.ring))
		}
	}
}

func TestWinStats(t *testing.T) {
	st := newWinStats()
	for i := 1; i <= 100; i++ {
		st.add(kindSpend, time.Duration(i)*time.Millisecond, nil)
	}
	st.add(kindSpend, 0, errors.New("spend: status 500"))
	st.add(kindSpend, 0, errors.New("spend: status 503"))
	st.skipped[kindGet]++
	w := st.window()
	sp := w.Kinds[kindSpend]
	if sp.Count != 100 || sp.Errors != 2 || sp.P50 != 50 || sp.P99 != 99 || sp.Max != 100 || sp.FirstErr != "spend: status 500" {
		t.Errorf("spend: %+v", sp)
	}
	if w.Kinds[kindGet].Skipped != 1 || w.Requests() != 102 || w.Errors() != 2 {
		t.Errorf("get %+v, requests %d, errors %d", w.Kinds[kindGet], w.Requests(), w.Errors())
	}
}

// TestSoakAgainstTokend runs the soak for a few seconds against a real
// `tokend serve` (sweeper, dispatcher and feed hub running) on a fresh
// database: every request kind answered in every window, feed events and
// webhook deliveries seen, no error, tokend's and Postgres' CPU and the
// tables read.
func TestSoakAgainstTokend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts tokend")
	}
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL, Env: []string{
		"TOKEND_WEBHOOK_ALLOWED_HOSTS=127.0.0.1", "TOKEND_SWEEP_INTERVAL=1s", "TOKEND_EVENT_RETENTION=1s", "TOKEND_RATE_LIMIT=0",
	}})
	cfg := SoakConfig{
		URL: srv.URL, Rate: 40, DurationS: 6, WindowS: 2, TTLSeconds: 10, RetentionS: 1,
		EventRetentionS: 1, SweepIntervalS: 1, MaxInFlight: 64,
		PID: childPID(t, "tokend"), PgPID: postmaster(t, dbURL),
		key:   proctest.CreateKey(t, dbURL, "soak", "client"),
		opKey: proctest.CreateKey(t, dbURL, "soak", "operator"),
		db:    dbURL, hookListen: "127.0.0.1:0",
	}
	var out strings.Builder
	res, err := runSoak(ctx, cfg, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	if len(res.Windows) != 3 {
		t.Fatalf("%d windows, want 3", len(res.Windows))
	}
	var hooks int64
	for _, w := range res.Windows {
		for _, k := range append(append([]string{}, requestKinds...), kindFeed) {
			if ks := w.Kinds[k]; ks.Count == 0 || ks.Errors != 0 {
				t.Errorf("window %d %s: %+v, want answers and no error", w.Index, k, ks)
			}
		}
		if ks := w.Kinds[kindWebhook]; ks.Errors != 0 {
			t.Errorf("window %d webhook: %+v", w.Index, ks)
		}
		hooks += w.Kinds[kindWebhook].Count
		if w.TokendCPUUs <= 0 || w.PgCPUUs <= 0 || w.RSSKB <= 0 || w.Goroutines <= 0 || w.table("tokens").Bytes <= 0 {
			t.Errorf("window %d: CPU %v/%v µs, RSS %d, goroutines %d, tokens %d B: want all measured",
				w.Index, w.TokendCPUUs, w.PgCPUUs, w.RSSKB, w.Goroutines, w.table("tokens").Bytes)
		}
	}
	if hooks == 0 {
		t.Error("the receiver got no webhook delivery")
	}
	var txt strings.Builder
	if err := writeSoakReport(&txt, res); err != nil || !strings.Contains(txt.String(), "verdict: ") {
		t.Errorf("report: %v\n%s", err, txt.String())
	}
}

// childPID is the process id of this process's child named comm.
func childPID(t *testing.T, comm string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		if f := strings.Fields(s[close+1:]); len(f) > 1 && f[1] == self && s[open+1:close] == comm {
			return pid
		}
	}
	t.Fatalf("no child process %q", comm)
	return 0
}

// postmaster is the process id of the Postgres server of dbURL: the parent
// of a backend. The test's Postgres must run on this machine.
func postmaster(t *testing.T, dbURL string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var backend int
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/stat")
	if err != nil {
		t.Skipf("Postgres does not run on this machine (backend %d not in /proc): %v", backend, err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	pm, _ := strconv.Atoi(f[1])
	return pm
}

// slowTokend answers every request of the soak's mix as tokend would, each
// after delay: enough of the API to time the soak's requests.
func slowTokend(delay time.Duration) http.Handler {
	var mu sync.Mutex
	intents := map[string]string{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/tokens":
			mu.Lock()
			key := r.Header.Get("Idempotency-Key")
			id, replay := intents[key]
			if !replay {
				id = fmt.Sprintf("tok_%d", len(intents))
				intents[key] = id
			} else {
				w.Header().Set("Idempotent-Replayed", "true")
			}
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q,"token":"tks_%s"}`, id, id)
		case r.URL.Path == "/v1/tokens/consume":
			b, _ := io.ReadAll(r.Body)
			if strings.Contains(string(b), soakLeaseOp) {
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprint(w, `{"generation":1}`)
				return
			}
			fmt.Fprint(w, `{"state":"consumed"}`)
		default: // GET, complete, revoke
			fmt.Fprint(w, `{}`)
		}
	})
}

// TestSoakTimesEachRequest: every kind's latency covers its request (here
// at least the server's delay), not only the wait before it was sent.
func TestSoakTimesEachRequest(t *testing.T) {
	const delay = 30 * time.Millisecond
	srv := httptest.NewServer(slowTokend(delay))
	defer srv.Close()
	s := &soak{cfg: SoakConfig{URL: srv.URL, TTLSeconds: 120}, run: "t", stats: newWinStats()}
	var err error
	if s.client, err = newAPI(target{base: srv.URL, key: "k"}, 4); err != nil {
		t.Fatal(err)
	}
	if s.op, err = newAPI(target{base: srv.URL, key: "o"}, 4); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kindIssue, kindIssue, kindReplay, kindSpend, kindGet, kindRevoke, kindLease} {
		s.do(k, time.Now())
	}
	w := s.stats.window()
	for _, k := range requestKinds {
		ks := w.Kinds[k]
		if ks.Count == 0 || ks.Errors != 0 || ks.P50 < ms(delay) {
			t.Errorf("%s: %+v, want answers timed at %v or more", k, ks, delay)
		}
	}
}
