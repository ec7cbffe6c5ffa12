package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valyala/fasthttp"
)

// Request kinds of the soak's mix, and the two it observes without sending.
const (
	kindIssue    = "issue"    // POST /v1/tokens, a new Idempotency-Key
	kindReplay   = "replay"   // POST /v1/tokens again with a recent key and body
	kindSpend    = "spend"    // POST /v1/tokens/consume of ledger.credit (atomic)
	kindLease    = "lease"    // POST /v1/tokens/consume of the lease-mode operation: 202
	kindComplete = "complete" // POST /v1/tokens/{id}/complete of that lease
	kindGet      = "get"      // GET /v1/tokens/{id}
	kindRevoke   = "revoke"   // POST /v1/admin/tokens/{id}/revoke (operator key)
	kindFeed     = "feed"     // events read by the feed follower: lag from the event's time
	kindWebhook  = "webhook"  // deliveries the local receiver got: lag from the event's time
)

// requestKinds are the kinds the soak sends, in report order; lagKinds
// are what it observes.
var (
	requestKinds = []string{kindIssue, kindReplay, kindSpend, kindLease, kindComplete, kindGet, kindRevoke}
	lagKinds     = []string{kindFeed, kindWebhook}
)

// soakCycle is the scheduled mix, one slot a tick of the fixed rate. A
// lease slot sends three requests (issue, lease, complete). Per cycle: 5
// issues, 2 spends and a revoke of 4 atomic tokens, so one in four is left
// to expire and the sweeper has expiries to record as well as purges.
var soakCycle = []string{kindIssue, kindGet, kindSpend, kindIssue, kindReplay, kindGet,
	kindIssue, kindLease, kindSpend, kindIssue, kindRevoke, kindGet}

// soakLeaseOp is the lease-mode operation the soak declares.
const soakLeaseOp = "soak.lease"

// SoakConfig is what a soak was asked to do; it is recorded in soak.json.
type SoakConfig struct {
	URL             string   `json:"url"`
	Rate            float64  `json:"rate_per_s"` // scheduled slots per second
	DurationS       float64  `json:"duration_s"`
	WindowS         float64  `json:"window_s"`
	TTLSeconds      int      `json:"ttl_s"`       // of every token issued
	RetentionS      int      `json:"retention_s"` // the operations' retention_seconds
	EventRetentionS float64  `json:"event_retention_s"`
	SweepIntervalS  float64  `json:"sweep_interval_s"`
	MaxInFlight     int      `json:"max_in_flight"`
	PID             int      `json:"tokend_pid,omitempty"`
	PgPID           int      `json:"postmaster_pid,omitempty"`
	HookTypes       string   `json:"webhook_event_types,omitempty"` // empty: all
	Notes           []string `json:"notes,omitempty"`

	key, opKey string
	db         string
	hookListen string
	hookHost   string // the host webhooks are registered with
	hookTypes  string // event types the endpoint asks for, comma-separated; "" all
	out        string
	report     string
}

// horizon is how long after the start the tables can first hold
// everything the retention settings keep and no more: a token's TTL, its
// retention, its events' retention and two sweeps.
func (c SoakConfig) horizon() time.Duration {
	return time.Duration((float64(c.TTLSeconds+c.RetentionS) + c.EventRetentionS + 2*c.SweepIntervalS) * float64(time.Second))
}

func parseSoakFlags(args []string, stderr io.Writer) (SoakConfig, error) {
	c := SoakConfig{}
	fs := flag.NewFlagSet("tokend-load soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dur, win, evRet, sweep time.Duration
	fs.StringVar(&c.URL, "url", "", "tokend base URL")
	fs.StringVar(&c.key, "key", os.Getenv("TOKEND_LOAD_KEY"), "client API key (env TOKEND_LOAD_KEY)")
	fs.StringVar(&c.opKey, "operator-key", os.Getenv("TOKEND_LOAD_OPERATOR_KEY"), "operator API key of the same tenant (env TOKEND_LOAD_OPERATOR_KEY)")
	fs.StringVar(&c.db, "db", os.Getenv("TOKEND_BENCH_DATABASE_URL"), "tokend's database, read only: table sizes (env TOKEND_BENCH_DATABASE_URL)")
	fs.IntVar(&c.PID, "pid", 0, "process id of tokend: its CPU and RSS")
	fs.IntVar(&c.PgPID, "pg-pid", 0, "process id of Postgres' postmaster: the cluster's CPU")
	fs.Float64Var(&c.Rate, "rate", 50, "scheduled operations a second (open loop; a lease slot sends 3 requests)")
	fs.DurationVar(&dur, "duration", time.Hour, "length of the soak")
	fs.DurationVar(&win, "window", time.Minute, "length of a report window")
	fs.IntVar(&c.TTLSeconds, "ttl", 120, "ttl_seconds of every token issued")
	fs.IntVar(&c.RetentionS, "retention", 60, "retention_seconds the soak declares for ledger.credit and "+soakLeaseOp)
	fs.DurationVar(&evRet, "event-retention", time.Minute, "tokend's TOKEND_EVENT_RETENTION (for the report's horizon)")
	fs.DurationVar(&sweep, "sweep-interval", 10*time.Second, "tokend's TOKEND_SWEEP_INTERVAL (for the report's horizon)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", 512, "requests in flight at most; a slot past it is an error (overload)")
	fs.StringVar(&c.hookListen, "hook-listen", "127.0.0.1:0", "address of the local webhook receiver")
	fs.StringVar(&c.hookHost, "hook-host", "", "host webhooks are registered with (default: the receiver's address)")
	fs.StringVar(&c.hookTypes, "hook-types", "", "event types the webhook endpoint asks for, comma-separated; empty: all")
	fs.StringVar(&c.out, "out", "", "directory for soak.json, soak.txt and soak.svg; empty: stdout only")
	fs.StringVar(&c.report, "report", "", "redraw the report of this soak.json (and with -out its files) and exit")
	fs.Func("note", "a line for the report's notes (repeatable)", func(s string) error {
		c.Notes = append(c.Notes, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.report != "" {
		return c, nil
	}
	c.URL = strings.TrimRight(c.URL, "/")
	c.HookTypes = c.hookTypes
	c.DurationS, c.WindowS = dur.Seconds(), win.Seconds()
	c.EventRetentionS, c.SweepIntervalS = evRet.Seconds(), sweep.Seconds()
	switch {
	case c.URL == "" || c.key == "" || c.opKey == "":
		return c, errors.New("soak: -url, -key and -operator-key are required")
	case c.Rate <= 0 || dur <= 0 || win <= 0 || win > dur:
		return c, errors.New("soak: want a positive -rate, and 0 < -window ≤ -duration")
	case c.TTLSeconds < 10 || c.RetentionS < 1 || c.MaxInFlight < 1:
		return c, errors.New("soak: want -ttl ≥ 10, -retention ≥ 1, -max-in-flight ≥ 1")
	}
	return c, nil
}

// soakCmd is the "soak" subcommand.
func soakCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseSoakFlags(args, stderr)
	if err != nil {
		return err
	}
	if cfg.report != "" {
		res, err := readSoak(cfg.report)
		if err != nil {
			return err
		}
		if cfg.out != "" {
			if err := saveSoak(cfg.out, res); err != nil {
				return err
			}
		}
		return writeSoakReport(stdout, res)
	}
	res, err := runSoak(ctx, cfg, stdout, stderr)
	if res != nil && cfg.out != "" {
		if werr := saveSoak(cfg.out, res); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	return writeSoakReport(stdout, res)
}

// soak is one running soak.
type soak struct {
	cfg     SoakConfig
	client  *api // client key
	op      *api // operator key
	db      *pgxpool.Pool
	log     io.Writer
	run     string
	seq     atomic.Int64
	pool    fifo      // atomic tokens to spend or revoke
	recent  recent    // recently issued, for replays and GETs
	stats   *winStats // the window being filled
	statsMu sync.Mutex
	hooks   sync.Map // webhook-id → struct{}, to count duplicates
	dups    atomic.Int64
	hookID  string
	port    int // tokend's, to count its open connections
}

// runSoak runs the soak and returns its windows and verdict.
func runSoak(ctx context.Context, cfg SoakConfig, stdout, stderr io.Writer) (*SoakResult, error) {
	s := &soak{cfg: cfg, log: stderr, run: runID(), stats: newWinStats()}
	var err error
	if u, err := url.Parse(cfg.URL); err == nil {
		s.port, _ = strconv.Atoi(u.Port())
	}
	if s.client, err = newAPI(target{base: cfg.URL, key: cfg.key}, cfg.MaxInFlight+4); err != nil {
		return nil, err
	}
	defer s.client.close()
	if s.op, err = newAPI(target{base: cfg.URL, key: cfg.opKey}, 64); err != nil {
		return nil, err
	}
	defer s.op.close()
	if cfg.db != "" {
		pc, err := pgxpool.ParseConfig(cfg.db)
		if err != nil {
			return nil, fmt.Errorf("soak: -db: %w", err)
		}
		pc.MaxConns = 1
		if s.db, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return nil, fmt.Errorf("soak: -db: %w", err)
		}
		defer s.db.Close()
	}

	// The receiver first: the endpoint is registered with its address.
	ln, err := net.Listen("tcp", cfg.hookListen)
	if err != nil {
		return nil, fmt.Errorf("soak: webhook receiver: %w", err)
	}
	hookSrv := &http.Server{Handler: http.HandlerFunc(s.receive), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hookSrv.Serve(ln) }()
	defer hookSrv.Close()
	if err := s.setup(ctx, ln.Addr().(*net.TCPAddr)); err != nil {
		return nil, err
	}

	res := &SoakResult{Started: time.Now().UTC(), Config: cfg}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var followers sync.WaitGroup
	followers.Go(func() { s.follow(loadCtx) })

	total := time.Duration(cfg.DurationS * float64(time.Second))
	win := time.Duration(cfg.WindowS * float64(time.Second))
	t0 := time.Now()
	scheduled := make(chan struct{}) // closed when every slot has been answered
	windows := make(chan struct{})
	fmt.Fprintln(stdout, soakLineHeader)
	go func() {
		// The windows close on their own clock, so the reads at a boundary
		// (/proc, /metrics, table sizes) never delay a scheduled slot.
		defer close(windows)
		prev := s.sample(ctx)
		for k := 1; ; k++ {
			end := t0.Add(time.Duration(k) * win)
			last := !end.Before(t0.Add(total))
			if last {
				end = t0.Add(total)
			}
			select {
			case <-time.After(time.Until(end)):
			case <-ctx.Done():
				last = true
			}
			if last {
				<-scheduled
				s.checkEndpoint(ctx)
				s.closeWindow(ctx, res, prev, t0, stdout)
				return
			}
			prev = s.closeWindow(ctx, res, prev, t0, stdout)
		}
	}()
	var inflight sync.WaitGroup
	sem := make(chan struct{}, cfg.MaxInFlight)
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	for slot := int64(0); ; slot++ {
		due := t0.Add(time.Duration(slot) * interval)
		if due.Sub(t0) >= total || ctx.Err() != nil {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		kind := soakCycle[slot%int64(len(soakCycle))]
		select {
		case sem <- struct{}{}:
			inflight.Go(func() {
				defer func() { <-sem }()
				s.do(kind, due)
			})
		default:
			s.record(kind, 0, fmt.Errorf("overload: %d requests in flight", cfg.MaxInFlight))
		}
	}
	inflight.Wait()
	close(scheduled)
	<-windows
	stopLoad()
	followers.Wait()
	res.Finished = time.Now().UTC()
	res.DuplicateDeliveries = s.dups.Load()
	res.Verdict = judgeSoak(res.Config, res.Windows)
	return res, ctx.Err()
}

// setup declares the soak's operations with its retention and registers
// the webhook endpoint of the receiver at addr.
func (s *soak) setup(ctx context.Context, addr *net.TCPAddr) error {
	maxTTL := max(s.cfg.TTLSeconds, 3600)
	for _, p := range []struct{ name, body string }{
		{"ledger.credit", fmt.Sprintf(`{"mode":"atomic","max_ttl_seconds":%d,"retention_seconds":%d}`, maxTTL, s.cfg.RetentionS)},
		{soakLeaseOp, fmt.Sprintf(`{"mode":"lease","on_lease_expiry":"unknown","lease_seconds":60,"max_ttl_seconds":%d,"retention_seconds":%d}`, maxTTL, s.cfg.RetentionS)},
	} {
		ans, err := s.op.do(fasthttp.MethodPut, "/v1/admin/operations/"+p.name, []byte(p.body))
		if err == nil {
			_, err = ans.expect("declare "+p.name, http.StatusOK)
		}
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	host := s.cfg.hookHost
	if host == "" {
		host = addr.IP.String()
	}
	req := map[string]any{"url": fmt.Sprintf("http://%s/hook", net.JoinHostPort(host, strconv.Itoa(addr.Port)))}
	if s.cfg.hookTypes != "" {
		req["event_types"] = strings.Split(s.cfg.hookTypes, ",")
	}
	body, _ := json.Marshal(req)
	ans, err := s.op.do(fasthttp.MethodPost, "/v1/admin/webhooks", body)
	if err != nil {
		return fmt.Errorf("soak: register the webhook: %w", err)
	}
	b, err := ans.expect("register the webhook (is TOKEND_WEBHOOK_ALLOWED_HOSTS="+host+" set on tokend?)", http.StatusCreated)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	var w struct{ ID string }
	if err := json.Unmarshal(b, &w); err != nil || w.ID == "" {
		return fmt.Errorf("soak: register the webhook: no id in %.200s", b)
	}
	s.hookID = w.ID
	return ctx.Err()
}

// checkEndpoint records an error of kind webhook when the endpoint is
// disabled or failing at the end: a receiver that answers 200 must not be.
func (s *soak) checkEndpoint(ctx context.Context) {
	if ctx.Err() != nil || s.hookID == "" {
		return
	}
	ans, err := s.op.do(fasthttp.MethodGet, "/v1/admin/webhooks/"+s.hookID, nil)
	var b []byte
	if err == nil {
		b, err = ans.expect("webhook endpoint", http.StatusOK)
	}
	if err == nil {
		var w struct {
			Enabled      bool       `json:"enabled"`
			FailingSince *time.Time `json:"failing_since"`
		}
		if err = json.Unmarshal(b, &w); err == nil && (!w.Enabled || w.FailingSince != nil) {
			err = fmt.Errorf("webhook endpoint enabled=%v failing_since=%v", w.Enabled, w.FailingSince)
		}
	}
	if err != nil {
		s.record(kindWebhook, 0, err)
	}
}

// record adds one sample (a latency or a lag) or one error to the window.
func (s *soak) record(kind string, d time.Duration, err error) {
	s.statsMu.Lock()
	s.stats.add(kind, d, err)
	s.statsMu.Unlock()
}

func (s *soak) skip(kind string) {
	s.statsMu.Lock()
	s.stats.skipped[kind]++
	s.statsMu.Unlock()
}

// do sends the requests of one slot scheduled at due. Latencies are from
// the schedule, not from the send: in an open loop a slow answer delays
// nothing else, and a queue in the load shows as latency.
func (s *soak) do(kind string, due time.Time) {
	switch kind {
	case kindIssue:
		_, err := s.issue("ledger.credit", true)
		s.record(kind, time.Since(due), err)
	case kindReplay:
		r, ok := s.recent.pick(time.Duration(s.cfg.TTLSeconds) * time.Second / 2)
		if !ok {
			s.skip(kind)
			return
		}
		err := s.replay(r)
		s.record(kind, time.Since(due), err)
	case kindSpend:
		t, ok := s.pool.take(time.Duration(s.cfg.TTLSeconds) * time.Second / 2)
		if !ok {
			s.skip(kind)
			return
		}
		err := s.spend(t)
		s.record(kind, time.Since(due), err)
	case kindRevoke:
		t, ok := s.pool.take(time.Duration(s.cfg.TTLSeconds) * time.Second / 2)
		if !ok {
			s.skip(kind)
			return
		}
		err := s.revoke(t)
		s.record(kind, time.Since(due), err)
	case kindGet:
		r, ok := s.recent.pick(time.Duration(s.cfg.TTLSeconds) * time.Second / 2)
		if !ok {
			s.skip(kind)
			return
		}
		err := getToken(s.client, r.id)
		s.record(kind, time.Since(due), err)
	case kindLease:
		t, err := s.issue(soakLeaseOp, false)
		s.record(kindIssue, time.Since(due), err)
		if err != nil {
			return
		}
		start := time.Now()
		gen, err := s.lease(t)
		s.record(kindLease, time.Since(start), err)
		if err != nil {
			return
		}
		start = time.Now()
		err = s.complete(t.id, gen)
		s.record(kindComplete, time.Since(start), err)
	}
}

// soakToken is a token the soak issued.
type soakToken struct {
	id, secret, subject, account, key string
	body                              []byte
	at                                time.Time
}

func (s *soak) issue(op string, keep bool) (soakToken, error) {
	n := s.seq.Add(1)
	t := soakToken{
		subject: "user-" + strconv.FormatInt(n%1000, 10),
		account: "acct-" + strconv.FormatInt(n%1000, 10),
		key:     "soak-" + s.run + "-" + strconv.FormatInt(n, 10),
	}
	body, err := json.Marshal(issueBody{Operation: op, Subject: t.subject, TTLSeconds: s.cfg.TTLSeconds,
		Payload: creditPayload{Account: t.account, Amount: 1}})
	if err != nil {
		return t, err
	}
	t.body = body
	ans, err := s.client.do(fasthttp.MethodPost, "/v1/tokens", body, "Idempotency-Key", t.key)
	if err != nil {
		return t, fmt.Errorf("issue: %w", err)
	}
	if body, err = ans.expect("issue", http.StatusCreated); err != nil {
		return t, err
	}
	var out struct{ ID, Token string }
	if err := json.Unmarshal(body, &out); err != nil || out.ID == "" || out.Token == "" {
		return t, fmt.Errorf("issue: no token id and secret in %.200s", body)
	}
	t.id, t.secret, t.at = out.ID, out.Token, time.Now()
	if keep {
		s.recent.add(soakToken{id: t.id, key: t.key, body: t.body, at: t.at})
		s.pool.add(t)
	}
	return t, nil
}

// replay issues r's intent again: the same token, marked replayed.
func (s *soak) replay(r soakToken) error {
	ans, err := s.client.do(fasthttp.MethodPost, "/v1/tokens", r.body, "Idempotency-Key", r.key)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	body, err := ans.expect("replay", http.StatusCreated)
	if err != nil {
		return err
	}
	var out struct{ ID string }
	_ = json.Unmarshal(body, &out)
	if out.ID != r.id || ans.replayed != "true" {
		return fmt.Errorf("replay: got token %q (Idempotent-Replayed %q), want %s replayed", out.ID, ans.replayed, r.id)
	}
	return nil
}

func (s *soak) spend(t soakToken) error {
	body, _ := json.Marshal(spendBody{Token: t.secret, Operation: "ledger.credit", Subject: t.subject,
		Payload: creditPayload{Account: t.account, Amount: 1}})
	ans, err := s.client.do(fasthttp.MethodPost, "/v1/tokens/consume", body)
	if err != nil {
		return fmt.Errorf("spend: %w", err)
	}
	_, err = ans.expect("spend", http.StatusOK)
	return err
}

func (s *soak) lease(t soakToken) (int64, error) {
	body, _ := json.Marshal(spendBody{Token: t.secret, Operation: soakLeaseOp, Subject: t.subject,
		Payload: creditPayload{Account: t.account, Amount: 1}})
	ans, err := s.client.do(fasthttp.MethodPost, "/v1/tokens/consume", body)
	if err != nil {
		return 0, fmt.Errorf("lease: %w", err)
	}
	b, err := ans.expect("lease", http.StatusAccepted)
	if err != nil {
		return 0, err
	}
	var out struct {
		Generation *int64 `json:"generation"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Generation == nil {
		return 0, fmt.Errorf("lease: no generation in %.200s", b)
	}
	return *out.Generation, nil
}

func (s *soak) complete(id string, gen int64) error {
	body := fmt.Appendf(nil, `{"generation":%d,"status":200,"result":{"soak":true}}`, gen)
	ans, err := s.client.do(fasthttp.MethodPost, "/v1/tokens/"+url.PathEscape(id)+"/complete", body)
	if err != nil {
		return fmt.Errorf("complete: %w", err)
	}
	_, err = ans.expect("complete", http.StatusOK)
	return err
}

func (s *soak) revoke(t soakToken) error {
	ans, err := s.op.do(fasthttp.MethodPost, "/v1/admin/tokens/"+url.PathEscape(t.id)+"/revoke", []byte(`{"reason":"soak"}`))
	if err != nil {
		return fmt.Errorf("revoke: %w", err)
	}
	_, err = ans.expect("revoke", http.StatusOK)
	return err
}

// follow reads the tenant's feed with long polls, from its start, and
// records each event's lag behind its time until ctx ends.
func (s *soak) follow(ctx context.Context) {
	a, err := newAPI(target{base: s.cfg.URL, key: s.cfg.key}, 1)
	if err != nil {
		s.record(kindFeed, 0, err)
		return
	}
	a.hc.ReadTimeout = 40 * time.Second
	defer a.close()
	cursor := ""
	for ctx.Err() == nil {
		path := "/v1/events?limit=500&wait=5"
		if cursor != "" {
			path += "&after=" + url.QueryEscape(cursor)
		}
		ans, err := a.do(fasthttp.MethodGet, path, nil)
		var b []byte
		if err == nil {
			b, err = ans.expect("feed", http.StatusOK)
		}
		var page struct {
			Items []struct {
				At time.Time `json:"at"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		if err == nil {
			if err = json.Unmarshal(b, &page); err == nil && page.NextCursor == "" {
				err = fmt.Errorf("feed: no next_cursor in %.200s", b)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.record(kindFeed, 0, err)
			time.Sleep(time.Second)
			continue
		}
		now := time.Now()
		s.statsMu.Lock()
		for _, e := range page.Items {
			s.stats.add(kindFeed, now.Sub(e.At), nil)
		}
		s.statsMu.Unlock()
		cursor = page.NextCursor
	}
}

// receive is the local webhook receiver: it answers 200 and records the
// delivery's lag behind its event's time.
func (s *soak) receive(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var d struct {
		Timestamp time.Time `json:"timestamp"`
	}
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err == nil && (d.Timestamp.IsZero() || r.Header.Get("webhook-id") == "" || r.Header.Get("webhook-signature") == "") {
		err = fmt.Errorf("webhook: a delivery without timestamp, webhook-id or signature: %.200s", b)
	}
	if err != nil {
		s.record(kindWebhook, 0, err)
		w.WriteHeader(http.StatusOK) // one bad delivery is counted once, not retried
		return
	}
	if _, dup := s.hooks.LoadOrStore(r.Header.Get("webhook-id"), struct{}{}); dup {
		s.dups.Add(1)
	}
	s.record(kindWebhook, time.Since(d.Timestamp), nil)
	w.WriteHeader(http.StatusOK)
}

// sample is what is read at each window boundary.
type sample struct {
	at                  time.Time
	tokendT, pgT, selfT int64 // CPU ticks
}

func (s *soak) sample(_ context.Context) sample {
	sm := sample{at: time.Now(), selfT: procTicks(os.Getpid(), false)}
	if s.cfg.PID > 0 {
		sm.tokendT = procTicks(s.cfg.PID, false)
	}
	if s.cfg.PgPID > 0 {
		sm.pgT = pgTicks(s.cfg.PgPID)
	}
	return sm
}

// closeWindow ends the window begun at prev, appends it to res and prints
// its line; it returns the sample the next window begins at.
func (s *soak) closeWindow(ctx context.Context, res *SoakResult, prev sample, t0 time.Time, stdout io.Writer) sample {
	now := s.sample(ctx)
	s.statsMu.Lock()
	st := s.stats
	s.stats = newWinStats()
	s.statsMu.Unlock()
	w := st.window()
	w.Index = len(res.Windows) + 1
	w.StartS = prev.at.Sub(t0).Seconds()
	w.EndS = now.at.Sub(t0).Seconds()
	ops := w.Requests()
	if ops > 0 {
		us := func(d int64) float64 { return float64(d) * 1e6 / ticksPerSecond / float64(ops) }
		if s.cfg.PID > 0 {
			w.TokendCPUUs = us(now.tokendT - prev.tokendT)
		}
		if s.cfg.PgPID > 0 {
			w.PgCPUUs = us(now.pgT - prev.pgT)
		}
		w.LoadCPUUs = us(now.selfT - prev.selfT)
	}
	if s.cfg.PID > 0 {
		w.RSSKB = rssKB(s.cfg.PID)
	}
	w.Goroutines, w.HeapBytes = s.goMetrics()
	w.Conns = tcpConnsTo(s.port)
	if s.db != nil {
		w.Tables, w.Analyzed = tableSizes(ctx, s.db)
	}
	w.PoolDepth = s.pool.len()
	res.Windows = append(res.Windows, w)
	fmt.Fprintln(stdout, soakLine(w))
	return now
}

// goMetrics reads go_goroutines and go_memstats_heap_inuse_bytes from
// tokend's /metrics; zeros when it cannot.
func (s *soak) goMetrics() (goroutines, heap int64) {
	ans, err := s.client.do(fasthttp.MethodGet, "/metrics", nil)
	if err != nil || ans.status != http.StatusOK {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(ans.body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			goroutines = int64(f)
		case "go_memstats_heap_inuse_bytes":
			heap = int64(f)
		}
	}
	return goroutines, heap
}

// rssKB is VmRSS of pid in KiB, 0 when unreadable.
func rssKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// tableSizes reads every table of tokend's schema: bytes with its indexes
// and TOAST, index bytes, live and dead rows; and how often autovacuum (or
// anyone) has analyzed tokens.
func tableSizes(ctx context.Context, db *pgxpool.Pool) ([]TableSize, int64) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := db.Query(ctx, `
SELECT c.relname, pg_total_relation_size(c.oid), pg_indexes_size(c.oid),
       coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       coalesce(s.autoanalyze_count + s.analyze_count, 0), coalesce(s.autovacuum_count + s.vacuum_count, 0)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
ORDER BY c.relname`)
	if err != nil {
		return nil, 0
	}
	defer rows.Close()
	var out []TableSize
	var analyzed int64
	for rows.Next() {
		var t TableSize
		var an int64
		if err := rows.Scan(&t.Name, &t.Bytes, &t.IndexBytes, &t.LiveRows, &t.DeadRows, &an, &t.Vacuums); err != nil {
			return nil, 0
		}
		if t.Name == "tokens" {
			analyzed = an
		}
		out = append(out, t)
	}
	return out, analyzed
}

// fifo holds atomic tokens for spends and revokes, oldest first.
type fifo struct {
	mu   sync.Mutex
	toks []soakToken
}

func (f *fifo) add(t soakToken) {
	f.mu.Lock()
	f.toks = append(f.toks, t)
	f.mu.Unlock()
}

// take hands out the oldest token younger than maxAge; older ones are left
// to expire (the sweeper's work).
func (f *fifo) take(maxAge time.Duration) (soakToken, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.toks) > 0 {
		t := f.toks[0]
		f.toks[0] = soakToken{}
		f.toks = f.toks[1:]
		if time.Since(t.at) < maxAge {
			return t, true
		}
	}
	return soakToken{}, false
}

func (f *fifo) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.toks)
}

// recent is a ring of the latest issued tokens, for replays and GETs.
type recent struct {
	mu   sync.Mutex
	ring [256]soakToken
	n    int
}

func (r *recent) add(t soakToken) {
	r.mu.Lock()
	r.ring[r.n%len(r.ring)] = t
	r.n++
	r.mu.Unlock()
}

// pick returns a random recent token younger than maxAge.
func (r *recent) pick(maxAge time.Duration) (soakToken, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(r.n, len(r.ring))
	for range 4 {
		if k == 0 {
			break
		}
		t := r.ring[rand.IntN(k)]
		if time.Since(t.at) < maxAge {
			return t, true
		}
	}
	return soakToken{}, false
}

// saveSoak writes soak.json and soak.txt to dir.
func saveSoak(dir string, res *SoakResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var txt bytes.Buffer
	if err := writeSoakReport(&txt, res); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.txt"), txt.Bytes(), 0o644); err != nil {
		return err
	}
	_, err = writeSoakPlot(dir, res)
	return err
}

func readSoak(path string) (*SoakResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res SoakResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res.Verdict = judgeSoak(res.Config, res.Windows)
	return &res, nil
}
