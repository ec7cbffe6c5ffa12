package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/proctest"
)

// TestRollingUpgradeFromPreviousRelease upgrades as an operator would,
// under traffic: the previous release (RELEASES' last line, built from git
// history) serves issues and spends on the ledger and a feed follower; the
// current build's `tokend migrate` runs while it serves; the current build
// starts beside it; the previous one is stopped with SIGTERM. A request
// that finds no listener is resent to the other instance, as a load
// balancer would. Every request must end in a 2xx, the ledger must hold
// exactly the spends, the feed must give every event once, and neither log
// may hold an ERROR line.
//
// It runs in scripts/test's deploy pass, which sets TOKEND_TEST_UPGRADE=1:
// building the previous release is a second compile of the module, the
// default passes' largest single cost. TOKEND_TEST_UPGRADE_FROM names
// another commit to upgrade from, and TOKEND_TEST_UPGRADE_MIGRATE_WITH
// another tokend binary to run migrate with (to reproduce an upgrade with
// an older runner).
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	if os.Getenv("TOKEND_TEST_UPGRADE") != "1" {
		t.Skip("the rolling upgrade runs in the deploy pass (scripts/test deploy), or with TOKEND_TEST_UPGRADE=1")
	}
	commit := cmp.Or(os.Getenv("TOKEND_TEST_UPGRADE_FROM"), previousRelease(t))
	prev := buildRelease(t, commit)
	migrateWith := cmp.Or(os.Getenv("TOKEND_TEST_UPGRADE_MIGRATE_WITH"), proctest.Binary(t))
	dbURL := pgtest.NewEmptyURL(t)

	old := startTokend(t, "previous "+commit[:min(len(commit), 12)], prev, dbURL)
	key := runTokend(t, prev, dbURL, "keys", "create", "--tenant", "acme", "--role", "client")
	lb := &balancer{backends: []string{old.url}}

	stop := make(chan struct{})
	var (
		wg             sync.WaitGroup
		spends, resent atomic.Int64
		failMu         sync.Mutex
		failures       []string
	)
	fail := func(s string) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, s)
		}
	}
	const workers = 8
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf(`{"account":"acct-%d","amount":1}`, w%4)
				status, body, r := lb.do(http.MethodPost, "/v1/tokens", key, fmt.Sprintf("up-%d-%d", w, n),
					`{"operation":"ledger.credit","subject":"alice","ttl_seconds":600,"payload":`+payload+`}`)
				resent.Add(int64(r))
				var issued struct{ Token string }
				if status/100 != 2 || json.Unmarshal(body, &issued) != nil {
					fail(fmt.Sprintf("issue: %d %s", status, body))
					continue
				}
				status, body, r = lb.do(http.MethodPost, "/v1/tokens/consume", key, "",
					fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"alice","payload":%s}`, issued.Token, payload))
				resent.Add(int64(r))
				if status != http.StatusOK {
					fail(fmt.Sprintf("spend: %d %s", status, body))
					continue
				}
				spends.Add(1)
			}
		}()
	}
	feed := &follower{lb: lb, key: key, seen: map[string]int{}, cursor: "0"}
	feedDone := make(chan struct{})
	go func() { defer close(feedDone); feed.follow(stop) }()

	time.Sleep(3 * time.Second)
	// The current build's migrations, while the previous release serves.
	out := runTokendErr(t, migrateWith, dbURL, "migrate")
	t.Logf("migrate under traffic: %s", strings.TrimSpace(out))
	cur := startTokend(t, "current", proctest.Binary(t), dbURL)
	lb.set(old.url, cur.url)
	time.Sleep(3 * time.Second)
	if err := old.stop(); err != nil {
		t.Errorf("the previous release, stopped with SIGTERM: %v", err)
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var events []string
	rows, err := conn.Query(ctx, `SELECT event_id FROM token_events WHERE tenant_id = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	if events, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	feed.waitFor(len(events), pgtest.SettleTimeout)
	<-feedDone

	t.Logf("%d spends, %d requests resent to the other instance, %d events, feed read %d", spends.Load(), resent.Load(), len(events), len(feed.seen))
	for _, f := range failures {
		t.Errorf("a request without a final 2xx: %s", f)
	}
	var balance, entries int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT coalesce(sum(balance), 0) FROM ledger_accounts), (SELECT count(*) FROM ledger_entries)`).Scan(&balance, &entries); err != nil {
		t.Fatal(err)
	}
	if balance != spends.Load() || entries != spends.Load() || spends.Load() == 0 {
		t.Errorf("ledger: balance %d in %d entries after %d spends of 1", balance, entries, spends.Load())
	}
	for _, id := range events {
		if n := feed.seen[id]; n != 1 {
			t.Errorf("event %s given %d times by the feed, want once", id, n)
		}
	}
	if len(feed.seen) != len(events) || feed.err != "" {
		t.Errorf("the feed gave %d events (%s), the table holds %d", len(feed.seen), feed.err, len(events))
	}
	// What a token and its events cost in the database (docs/operations.md,
	// "Capacity"): rows and bytes, indexes and TOAST included.
	var tokens, tokenBytes, eventRows, eventBytes int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM tokens), pg_total_relation_size('tokens'),
		(SELECT count(*) FROM token_events), pg_total_relation_size('token_events') + pg_total_relation_size('event_positions')`).Scan(
		&tokens, &tokenBytes, &eventRows, &eventBytes); err != nil {
		t.Fatal(err)
	}
	if tokens > 0 && eventRows > 0 {
		t.Logf("capacity: %d tokens, %d bytes each (tokens with indexes); %d events, %.1f per token, %d bytes each (token_events and event_positions with indexes)",
			tokens, tokenBytes/tokens, eventRows, float64(eventRows)/float64(tokens), eventBytes/eventRows)
	}
	for _, p := range []*tokendProc{old, cur} {
		for _, l := range strings.Split(p.logs(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) || strings.HasPrefix(l, "level=ERROR") {
				t.Errorf("%s logged an ERROR: %s", p.name, l)
			}
		}
	}
}

// previousRelease is the commit on RELEASES' last line.
func previousRelease(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "RELEASES"))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			last = f[0]
		}
	}
	if last == "" {
		t.Fatal("RELEASES names no release")
	}
	return last
}

// buildRelease builds cmd/tokend as of commit from the repository's git
// history, once per commit on this machine (the binary is kept under the
// temporary directory), or skips when the history lacks the commit.
func buildRelease(t *testing.T, commit string) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("the previous release %s is not in this checkout's git history (a shallow clone? git fetch --unshallow): %v %s", commit, err, out)
	}
	bin := filepath.Join(os.TempDir(), "tokend-release-"+commit, "tokend")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	tmp := filepath.Join(src, "tokend-built")
	// The test binary's flags: its compiled dependencies serve this build
	// too, where a plain one compiled every one of them again.
	build := exec.Command("go", append(append([]string{"build"}, proctest.BuildFlags("")...), "-o", tmp, "./cmd/tokend")...)
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	// Copied then renamed: a concurrent run sees the whole binary or none.
	b, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	part := fmt.Sprintf("%s.%d", bin, os.Getpid())
	if err := os.WriteFile(part, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(part, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runTokend runs bin with args against dbURL and answers its stdout.
func runTokend(t *testing.T, bin, dbURL string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TOKEND_DATABASE_URL="+dbURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tokend %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// runTokendErr is runTokend answering stderr, which `tokend migrate`
// writes to.
func runTokendErr(t *testing.T, bin, dbURL string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TOKEND_DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tokend %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// tokendProc is a `tokend serve` of any build.
type tokendProc struct {
	name, url string
	cmd       *exec.Cmd
	mu        sync.Mutex
	out       bytes.Buffer
}

func (p *tokendProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *tokendProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop sends SIGTERM and waits for the process to exit.
func (p *tokendProc) stop() error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	return p.cmd.Wait()
}

func startTokend(t *testing.T, name, bin, dbURL string) *tokendProc {
	t.Helper()
	// The process picks its port and logs it (proctest.Start says why).
	p := &tokendProc{name: name}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = append(os.Environ(), "TOKEND_DATABASE_URL="+dbURL, "TOKEND_LISTEN=127.0.0.1:0",
		"TOKEND_SECRET_KEY="+proctest.SecretKey, "TOKEND_REDIS_URL=", "TOKEND_ALLOW_SUPERUSER=1")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s tokend logs:\n%s", p.name, p.logs())
		}
	})
	addr, err := proctest.WaitBound(p.logs, nil, time.Minute)
	if err != nil {
		t.Fatalf("%s tokend: %v\n%s", name, err, p.logs())
	}
	p.url = "http://" + addr
	if err := proctest.WaitHealthy(p.url, time.Minute); err != nil {
		t.Fatalf("%s tokend did not become healthy: %v\n%s", name, err, p.logs())
	}
	return p
}

// balancer sends each request to one backend in turn, and resends a
// request that reached no listener (or lost its connection before an
// answer) to the next, as a load balancer does. Every request it sends is
// safe to resend: issues carry an Idempotency-Key, a spend of one token
// replays its outcome.
type balancer struct {
	mu       sync.Mutex
	backends []string
	next     int
}

var lbClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

func (b *balancer) set(backends ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = backends
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return b.backends[b.next%len(b.backends)]
}

// do answers the final status and body, and how many times the request
// was resent.
func (b *balancer) do(method, path, key, idem, body string) (int, []byte, int) {
	var last error
	for try := range 100 {
		req, err := http.NewRequest(method, b.pick()+path, strings.NewReader(body))
		if err != nil {
			return 0, []byte(err.Error()), try
		}
		req.Header.Set("Authorization", "Bearer "+key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := lbClient.Do(req)
		if err != nil {
			last = err
			time.Sleep(10 * time.Millisecond)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return resp.StatusCode, b, try
	}
	return 0, []byte("no backend answered: " + fmt.Sprint(last)), 100
}

// follower reads the feed through the balancer as a consumer does: after
// its cursor, in the page's epoch, counting each event id it is given.
type follower struct {
	lb            *balancer
	key           string
	mu            sync.Mutex
	seen          map[string]int
	cursor, epoch string
	want          int // stop once this many are seen (wantSet)
	wantSet       bool
	err           string
}

func (f *follower) waitFor(n int, timeout time.Duration) {
	f.mu.Lock()
	f.want, f.wantSet = n, true
	f.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		done := len(f.seen) >= n || f.err != ""
		f.mu.Unlock()
		if done {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.mu.Lock()
	f.err = fmt.Sprintf("gave %d of %d events within %s", len(f.seen), n, timeout)
	f.mu.Unlock()
}

func (f *follower) follow(stop <-chan struct{}) {
	for {
		f.mu.Lock()
		done := f.err != "" || f.wantSet && len(f.seen) >= f.want
		q := "/v1/events?limit=200&after=" + f.cursor
		if f.epoch != "" {
			q += "&epoch=" + f.epoch
		}
		f.mu.Unlock()
		if done {
			return
		}
		status, body, _ := f.lb.do(http.MethodGet, q, f.key, "", "")
		var page struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
			Epoch      string `json:"epoch"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &page) != nil {
			f.mu.Lock()
			f.err = fmt.Sprintf("feed read: %d %s", status, body)
			f.mu.Unlock()
			return
		}
		f.mu.Lock()
		for _, e := range page.Events {
			f.seen[e.ID]++
		}
		if page.NextCursor != "" {
			f.cursor = page.NextCursor
		}
		f.epoch = page.Epoch
		f.mu.Unlock()
		if len(page.Events) == 0 {
			select {
			case <-stop:
			default:
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
