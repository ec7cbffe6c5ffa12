package faults

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/proctest"
	"github.com/tokend/tokend/migrations"
)

// A Citus worker restarts (pg_ctl restart -m fast) while clients issue and
// spend tokens of a tenant whose shards it holds. It is a Citus cluster of
// the test's own (shared/citus/cluster, found through TOKEND_CITUS_SRC, which
// scripts/test's Citus pass sets): the pass's shared cluster is never
// touched. tokend is not restarted. It must answer 503 with Retry-After (or
// drop connections) while the worker is away and recover by itself; after
// the clients' retries, no effect is lost or duplicated; a tenant on the
// other worker is not stopped by it.
func TestCitusWorkerRestartMidLoad(t *testing.T) {
	src := os.Getenv("TOKEND_CITUS_SRC")
	if src == "" {
		t.Skip("no Citus: TOKEND_CITUS_SRC (shared/citus) unset; scripts/test's Citus pass sets it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "citus")
	if os.Geteuid() == 0 { // the servers run as postgres, which must reach dir
		dir = filepath.Join(os.TempDir(), "tokend-faults-citus-"+strings.ReplaceAll(t.Name(), "/", "-"))
		_ = os.RemoveAll(dir)
	}
	cluster := func(args ...string) string {
		out, err := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(src, "cluster")}, args...)...).Output()
		if err != nil {
			t.Fatalf("cluster %v: %v", args, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	cluster("start", dir)
	t.Cleanup(func() { _ = exec.Command("bash", filepath.Join(src, "cluster"), "stop", dir).Run() })
	dbURL := cluster("createdb", dir, "tokend")
	if err := migrations.ApplyURL(ctx, dbURL); err != nil {
		t.Fatal(err)
	}
	srv := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})

	// The tenant under load, and the worker that holds it.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const tenant = "citus-restart"
	var port int
	if err := conn.QueryRow(ctx, `
		SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
		WHERE p.shardid = get_shard_id_for_distribution_column('tokens', $1::text)`, tenant).Scan(&port); err != nil {
		t.Fatal(err)
	}
	ports, err := os.ReadFile(filepath.Join(dir, "ports"))
	if err != nil {
		t.Fatal(err)
	}
	var worker string
	for _, line := range strings.Split(string(ports), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == itoa(port) {
			worker = f[0]
		}
	}
	if worker == "" || worker == "coordinator" {
		t.Fatalf("tenant %s is on port %d (%q), want a worker", tenant, port, worker)
	}

	c := newClient(t, srv.URL, proctest.CreateKey(t, dbURL, tenant, "client"))
	l := startLoad(ctx, t, c, 8)
	const before, after = 40, 40
	if !waitFor(ctx, func() bool { return l.answered.Load() >= before }) {
		t.Fatalf("only %d spends answered before the deadline", l.answered.Load())
	}
	restartAt := time.Now()
	bindir := "/usr/lib/postgresql/15/bin"
	args := []string{"-D", filepath.Join(dir, worker), "-l", filepath.Join(dir, worker+".log"), "-m", "fast", "-w", "-t", "60", "restart"}
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
	if !recovered {
		t.Errorf("only %d spends answered in the %v after the restart, want %d: tokend did not recover",
			l.answered.Load()-mark, time.Since(restartAt).Round(time.Second), after)
	}
	o := l.all.outage()
	t.Logf("pg_ctl restart -m fast of %s took %v; %d spends answered before it and %d after",
		worker, workerBack.Round(time.Millisecond), mark, l.answered.Load()-mark)
	t.Logf("outage seen by clients: %d answers to retry, first at +%v, last at +%v after the restart began; first final answer to a request sent after that at +%v",
		o.failures, offset(restartAt, o.first), offset(restartAt, o.last), offset(restartAt, l.all.firstSuccessAfter(o.last)))
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

func itoa(n int) string {
	b := []byte{}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
