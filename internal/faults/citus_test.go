package faults

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	tokend "github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/testkit/proctest"
	"github.com/tokend/tokend/migrations"
)

// citusCluster is a Citus cluster of a test's own (shared/citus/cluster,
// found through TOKEND_CITUS_SRC, which scripts/test's Citus pass sets): the
// pass's shared cluster is never touched. It holds a migrated database
// tokend serves.
type citusCluster struct {
	dir   string
	dbURL string
	conn  *pgx.Conn
	ports map[int]string // node name (coordinator, worker1, …) by port
}

func startCitus(ctx context.Context, t *testing.T) *citusCluster {
	t.Helper()
	src := os.Getenv("TOKEND_CITUS_SRC")
	if src == "" {
		t.Skip("no Citus: TOKEND_CITUS_SRC (shared/citus) unset; scripts/test's Citus pass sets it")
	}
	dir := filepath.Join(t.TempDir(), "citus")
	if os.Geteuid() == 0 { // the servers run as postgres, which must reach dir
		dir = filepath.Join(os.TempDir(), "tokend-faults-citus-"+strings.ReplaceAll(t.Name(), "/", "-"))
		_ = os.RemoveAll(dir)
	}
	run := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(src, "cluster")}, args...)...).Output()
		if err != nil {
			t.Fatalf("cluster %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	run("start", dir)
	t.Cleanup(func() { _ = exec.Command("bash", filepath.Join(src, "cluster"), "stop", dir).Run() })
	c := &citusCluster{dir: dir, dbURL: run("createdb", dir, "tokend"), ports: map[int]string{}}
	if err := migrations.ApplyURL(ctx, c.dbURL); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	c.conn = conn
	ports, err := os.ReadFile(filepath.Join(dir, "ports"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ports), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if p, err := strconv.Atoi(f[1]); err == nil {
				c.ports[p] = f[0]
			}
		}
	}
	return c
}

// workerOf is the port and name of the worker that holds tenant's shards.
func (c *citusCluster) workerOf(ctx context.Context, t *testing.T, tenant string) (int, string) {
	t.Helper()
	var port int
	if err := c.conn.QueryRow(ctx, `
		SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
		WHERE p.shardid = get_shard_id_for_distribution_column('tokens', $1::text)`, tenant).Scan(&port); err != nil {
		t.Fatal(err)
	}
	name := c.ports[port]
	if name == "" || name == "coordinator" {
		t.Fatalf("tenant %s is on port %d (%q), want a worker", tenant, port, name)
	}
	return port, name
}

// tenantNotOn is a tenant name, made from prefix, whose shards are not on the
// worker at port.
func (c *citusCluster) tenantNotOn(ctx context.Context, t *testing.T, prefix string, port int) string {
	t.Helper()
	for i := range 100 {
		tenant := prefix + "-" + strconv.Itoa(i)
		if p, _ := c.workerOf(ctx, t, tenant); p != port {
			return tenant
		}
	}
	t.Fatalf("no tenant %s-N off the worker at port %d", prefix, port)
	return ""
}

// A Citus worker restarts (pg_ctl restart -m fast) while clients issue and
// spend tokens of a tenant whose shards it holds, and a client of a tenant
// on the other worker does the same. tokend is not restarted. It must
// answer 503 with Retry-After (or drop connections) while the worker is
// away and recover by itself; after the clients' retries, no effect is
// lost or duplicated. The other worker's tenant sees nothing of it: its
// key, too, is found without asking the worker that is away.
func TestCitusWorkerRestartMidLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := startCitus(ctx, t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: cl.dbURL})
	const tenant = "citus-restart"
	port, worker := cl.workerOf(ctx, t, tenant)
	bystander := cl.tenantNotOn(ctx, t, "citus-bystander", port)

	c := newClient(t, srv.URL, proctest.CreateKey(t, cl.dbURL, tenant, "client"))
	bc := newClient(t, srv.URL, proctest.CreateKey(t, cl.dbURL, bystander, "client"))
	l := startLoad(ctx, t, c, 8)
	bl := startLoad(ctx, t, bc, 1)
	const before, after = 40, 40
	if !waitFor(ctx, func() bool { return l.answered.Load() >= before }) {
		t.Fatalf("only %d spends answered before the deadline", l.answered.Load())
	}
	restartAt := time.Now()
	bindir := "/usr/lib/postgresql/15/bin"
	args := []string{"-D", filepath.Join(cl.dir, worker), "-l", filepath.Join(cl.dir, worker+".log"), "-m", "fast", "-w", "-t", "60", "restart"}
	cmd := exec.CommandContext(ctx, filepath.Join(bindir, "pg_ctl"), args...)
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", filepath.Join(bindir, "pg_ctl")}, args...)...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart %s: %v\n%s", worker, err, out)
	}
	workerBack := time.Since(restartAt)
	mark := l.answered.Load()
	recovered := waitFor(ctx, func() bool { return l.answered.Load() >= mark+after })
	l.stop()
	bl.stop()
	if !recovered {
		t.Errorf("only %d spends answered in the %v after the restart, want %d: tokend did not recover",
			l.answered.Load()-mark, time.Since(restartAt).Round(time.Second), after)
	}
	t.Logf("pg_ctl restart -m fast of %s took %v; %d spends answered before it and %d after",
		worker, workerBack.Round(time.Millisecond), mark, l.answered.Load()-mark)
	checkOutage(ctx, t, cl.dbURL, tenant, l, restartAt)

	t.Logf("tenant %s, on the other worker: %v", bystander, &bl.all)
	if o := bl.all.outage(); o.failures > 0 {
		t.Errorf("tenant %s, on the other worker, got %d answers to retry while %s restarted", bystander, o.failures, worker)
	}
	checkExactlyOnce(ctx, t, cl.dbURL, bystander, 1, bl.told)
}

// A tenant's shards move to the other worker (citus_move_shard_placement, by
// logical replication, the way the rebalancer moves them) while clients issue
// and spend its tokens and a consumer follows its feed. tokend is not
// restarted. Every answer is final or 503 with Retry-After; after the
// clients' retries no effect is lost or duplicated; and the consumer, reading
// on from its cursor across the move, sees every event of every token, each
// once.
func TestCitusShardMoveMidLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := startCitus(ctx, t)
	srv := proctest.Start(t, proctest.Options{DatabaseURL: cl.dbURL})
	const tenant = "citus-move"
	from, fromName := cl.workerOf(ctx, t, tenant)
	to := 0
	for p, name := range cl.ports {
		if p != from && name != "coordinator" {
			to = p
		}
	}
	key := proctest.CreateKey(t, cl.dbURL, tenant, "client")
	c := newClient(t, srv.URL, key)
	f := startFollower(ctx, t, srv.URL, key)
	l := startLoad(ctx, t, c, 8)
	const before, after = 40, 40
	if !waitFor(ctx, func() bool { return l.answered.Load() >= before }) {
		t.Fatalf("only %d spends answered before the deadline", l.answered.Load())
	}
	moveAt := time.Now()
	if _, err := cl.conn.Exec(ctx, `
		SELECT citus_move_shard_placement(get_shard_id_for_distribution_column('tokens', $1::text),
			'127.0.0.1', $2::int, '127.0.0.1', $3::int)`, tenant, from, to); err != nil {
		t.Fatalf("move %s's shards from %s: %v", tenant, fromName, err)
	}
	moved := time.Since(moveAt)
	if now, _ := cl.workerOf(ctx, t, tenant); now != to {
		t.Fatalf("tenant %s is still on port %d after the move to %d", tenant, now, to)
	}
	mark := l.answered.Load()
	recovered := waitFor(ctx, func() bool { return l.answered.Load() >= mark+after })
	l.stop()
	if !recovered {
		t.Errorf("only %d spends answered in the %v after the move, want %d",
			l.answered.Load()-mark, time.Since(moveAt).Round(time.Second), after)
	}
	t.Logf("citus_move_shard_placement of %s's shards from %s took %v; %d spends answered before it and %d after",
		tenant, fromName, moved.Round(time.Millisecond), mark, l.answered.Load()-mark)
	checkOutage(ctx, t, cl.dbURL, tenant, l, moveAt)

	// Every token issued and consumed: two events each, read once.
	want := 2 * len(l.told)
	if !waitFor(ctx, func() bool { return f.count() >= want }) {
		t.Errorf("the consumer read %d events, want %d", f.count(), want)
	}
	f.stop()
	f.check(t, l.told)
}

// checkOutage logs what the clients saw from at on and checks the answers
// and the effects.
func checkOutage(ctx context.Context, t *testing.T, dbURL, tenant string, l *load, at time.Time) {
	t.Helper()
	o := l.all.outage()
	if o.failures == 0 {
		t.Logf("outage seen by clients: none, every answer final")
	} else {
		t.Logf("outage seen by clients: %d answers to retry, first at +%v, last at +%v after it began; first final answer to a request sent after that at +%v",
			o.failures, offset(at, o.first), offset(at, o.last), offset(at, l.all.firstSuccessAfter(o.last)))
	}
	t.Logf("client requests (issues and spends): %v", &l.all)
	if o.without503RetryAfter > 0 {
		t.Errorf("%d answers 503 without Retry-After", o.without503RetryAfter)
	}
	for id, r := range l.told {
		if r.status != http.StatusOK {
			t.Errorf("token %s: final answer %s, want 200", id, r)
		}
	}
	checkExactlyOnce(ctx, t, dbURL, tenant, 1, l.told)
}

// follower reads a tenant's feed from its start, as a consumer does: it
// keeps its cursor and epoch, waits out 503s and dropped connections, and
// counts each event by id.
type follower struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	seen    map[string]int             // reads by event id
	byToken map[string]map[string]bool // event types read by token id
	errs    []error                    // reads that were neither an answer nor retryable
	epochs  []string                   // the feed's epochs, in the order read
}

func startFollower(ctx context.Context, t *testing.T, base, key string) *follower {
	c, err := tokend.New(base, key,
		tokend.WithHTTPClient(&http.Client{Timeout: 15 * time.Second}),
		tokend.WithRetry(tokend.Retry{Attempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &follower{cancel: cancel, done: make(chan struct{}), seen: map[string]int{}, byToken: map[string]map[string]bool{}}
	t.Cleanup(f.stop)
	go func() {
		defer close(f.done)
		after, epoch := "", ""
		for ctx.Err() == nil {
			p, err := c.Events(ctx, tokend.EventsRequest{After: after, Epoch: epoch, Limit: 50, Wait: time.Second})
			if err != nil {
				// A 503 or a dropped connection is waited out; any other
				// answer is wrong.
				var pr *tokend.Problem
				if ctx.Err() == nil && errors.As(err, &pr) && pr.Status != http.StatusServiceUnavailable {
					f.mu.Lock()
					f.errs = append(f.errs, err)
					f.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			f.mu.Lock()
			for _, e := range p.Items {
				f.seen[e.ID]++
				if f.byToken[e.TokenID] == nil {
					f.byToken[e.TokenID] = map[string]bool{}
				}
				f.byToken[e.TokenID][e.Type] = true
			}
			f.mu.Unlock()
			after = p.NextCursor
			if p.Epoch != "" && p.Epoch != epoch {
				epoch = p.Epoch
				f.mu.Lock()
				f.epochs = append(f.epochs, epoch)
				f.mu.Unlock()
			}
		}
	}()
	return f
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

func (f *follower) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

// check wants each event read once and, for every token told, its issue and
// its spend.
func (f *follower) check(t *testing.T, told map[string]response) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, err := range f.errs {
		t.Errorf("feed read: %v", err)
	}
	twice := 0
	for _, n := range f.seen {
		if n > 1 {
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d events were read more than once", twice)
	}
	for id := range told {
		if types := f.byToken[id]; !types["issued"] || !types["spend"] {
			t.Errorf("token %s: the feed gave %v, want its issued and spend events", id, types)
		}
	}
	t.Logf("the consumer read %d events of %d tokens, in %d epochs of the feed", len(f.seen), len(f.byToken), len(f.epochs))
}
