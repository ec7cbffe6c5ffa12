// Package proctest runs real tokend processes for tests that need more than
// one process, or a process to kill: build once, start, kill -9, restart.
package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	dirOnce  sync.Once
	buildDir string
	dirErr   error

	buildsMu sync.Mutex
	builds   = map[string]*build{} // by build tags
)

// build is one build of cmd/tokend.
type build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/tokend once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	return BinaryWithTags(t, "")
}

// BinaryWithTags is Binary for a build with tags, a comma-separated list as
// `go build -tags` takes it ("" is the plain build). Each list is built once
// per test binary, with the test binary's own flags (BuildFlags). The
// plain build is $TOKEND_TEST_TOKEND_BIN when set: scripts/test builds
// cmd/tokend once for every test process, which would otherwise each compile
// it at the same time.
func BinaryWithTags(t testing.TB, tags string) string {
	t.Helper()
	if bin := os.Getenv("TOKEND_TEST_TOKEND_BIN"); tags == "" && bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("TOKEND_TEST_TOKEND_BIN: %v", err)
		}
		return bin
	}
	dirOnce.Do(func() {
		removeStaleBuilds()
		buildDir = filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", buildPrefix, os.Getpid()))
		dirErr = os.MkdirAll(buildDir, 0o755)
	})
	if dirErr != nil {
		t.Fatal(dirErr)
	}
	buildsMu.Lock()
	b := builds[tags]
	if b == nil {
		b = &build{}
		builds[tags] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		dir := buildDir
		if tags != "" {
			dir = filepath.Join(buildDir, "tags-"+strings.ReplaceAll(tags, ",", "-"))
			if b.err = os.MkdirAll(dir, 0o755); b.err != nil {
				return
			}
		}
		args := append([]string{"build"}, BuildFlags(tags)...)
		args = append(args, "-o", dir, "github.com/tokend/tokend/cmd/tokend")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		b.path = filepath.Join(dir, "tokend")
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// ownTags is the build tags of the test binary that a build of a command
// must keep to share its compiled packages (nomsgpack.go).
var ownTags []string

// BuildFlags is the `go build` flags for a command that a test runs as a
// process: -race when the test binary has it, and the test binary's tags
// (ownTags) with extra's, a comma-separated list. With them the build reuses
// the test build's compiled packages; without, it compiles every dependency
// again (the standard library too, for a build without -race).
func BuildFlags(extra string) []string {
	var flags []string
	if raceBuild {
		flags = append(flags, "-race")
	}
	tags := append([]string(nil), ownTags...)
	if extra != "" {
		tags = append(tags, strings.Split(extra, ",")...)
	}
	if len(tags) > 0 {
		flags = append(flags, "-tags", strings.Join(tags, ","))
	}
	return flags
}

// buildPrefix names build directories; the suffix is the building test
// process's pid, so a later run can tell which ones are left over.
const buildPrefix = "tokend-proctest-"

// removeStaleBuilds deletes the build directories of test processes that have
// exited. A test binary has no hook that runs after its last test, so each
// run cleans up after the earlier ones instead.
func removeStaleBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), buildPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), buildPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// SecretKey is the server key test processes share, so any of them can
// re-derive the secrets another issued.
const SecretKey = "proctest-server-key-0123456789abcdef0123"

// Options configures a Server.
type Options struct {
	DatabaseURL string   // required
	RedisURL    string   // optional; empty: TOKEND_TEST_TOKEND_REDIS_URL (scripts/test's Redis Cluster pass), else none
	Env         []string // extra KEY=VALUE pairs
	BuildTags   string   // run a build with these tags (BinaryWithTags); "" the plain one
}

// Server is one running tokend process.
type Server struct {
	t    testing.TB
	opts Options
	addr string
	URL  string // http://host:port

	mu   sync.Mutex
	proc *process
	logs *bytes.Buffer
}

// process is one run of the command: done is closed once it has exited,
// and err is then what Wait returned.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs `tokend serve` on a loopback port the process picks itself and
// waits until it answers /healthz. The process is stopped when t ends.
//
// The address is the one the process logs it bound. A port picked here and
// handed over would be free only until another test's process took it,
// and /healthz would then answer from that one: this test's requests went
// to another test's tokend and its database (401s in the robustness pass).
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts}
	s.start("127.0.0.1:0")
	t.Cleanup(func() {
		s.Kill()
		if !s.raced() && t.Failed() {
			t.Logf("tokend %s logs:\n%s", s.addr, s.Logs())
		}
	})
	return s
}

// raced fails the test, with the process's logs, when they hold a report of
// the race detector (a -race build, see BinaryWithTags), and says whether.
func (s *Server) raced() bool {
	logs := s.Logs()
	if !strings.Contains(logs, "WARNING: DATA RACE") {
		return false
	}
	s.t.Errorf("tokend %s: the race detector reported a data race; its logs:\n%s", s.addr, logs)
	return true
}

// start runs the process on listen and waits until it has bound it (it
// logs so) and answers /healthz there. A restart asks for the address it
// had; if another process took it meanwhile, this one cannot bind it and
// exits, and the test fails instead of talking to the other.
func (s *Server) start(listen string) {
	s.t.Helper()
	s.raced() // a Restart replaces the logs of the process before
	cmd := exec.Command(BinaryWithTags(s.t, s.opts.BuildTags), "serve")
	redisURL := s.opts.RedisURL
	if redisURL == "" {
		redisURL = os.Getenv("TOKEND_TEST_TOKEND_REDIS_URL")
	}
	cmd.Env = append(os.Environ(), databaseEnv(s.opts.DatabaseURL)...)
	cmd.Env = append(cmd.Env,
		"TOKEND_LISTEN="+listen,
		"TOKEND_SECRET_KEY="+SecretKey,
		"TOKEND_REDIS_URL="+redisURL,
		// Tests connect as the server's superuser.
		"TOKEND_ALLOW_SUPERUSER=1",
	)
	s.mu.Lock()
	cmd.Env = append(cmd.Env, s.opts.Env...)
	s.mu.Unlock()
	logs := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: logs, mu: &s.mu}, &lockedWriter{w: logs, mu: &s.mu}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start tokend: %v", err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc, s.logs = p, logs
	s.mu.Unlock()
	addr, err := WaitBound(s.Logs, p.done, 30*time.Second)
	if errors.Is(err, errExited) {
		err = fmt.Errorf("%w: %v", err, p.err)
	}
	if err == nil && s.addr != "" && addr != s.addr {
		err = fmt.Errorf("bound %s, not its address %s", addr, s.addr)
	}
	if err == nil {
		s.addr, s.URL = addr, "http://"+addr
		err = WaitHealthy(s.URL, 30*time.Second)
	}
	if err != nil {
		s.Kill()
		s.t.Fatalf("tokend did not become healthy on %s: %v\n%s", listen, err, s.Logs())
	}
}

// WaitBound polls logs, a tokend serve process's output, until it says
// the address the process listens on; it gives up once exited is closed
// (nil: never) or timeout has passed. Start a process on port 0 and take
// its address from here: a port picked by the test and handed over may be
// another process's by the time it binds.
func WaitBound(logs func() string, exited <-chan struct{}, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		if addr := boundAddr(logs()); addr != "" {
			return addr, nil
		}
		select {
		case <-exited:
			if addr := boundAddr(logs()); addr != "" {
				return addr, nil
			}
			return "", errExited
		case <-deadline:
			return "", fmt.Errorf("no \"listening\" line in its logs after %v", timeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var errExited = errors.New("it exited before listening")

// boundAddr is the address of serve's "listening" line in logs (JSON, one
// record a line), or "".
func boundAddr(logs string) string {
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, `"listening"`) {
			continue
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" && rec.Addr != "" {
			return rec.Addr
		}
	}
	return ""
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop ends the process with SIGTERM (graceful shutdown) and waits for it.
func (s *Server) Stop() error { return s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.done
	return p.err
}

// Restart starts the process again on the same address after Kill or Stop.
func (s *Server) Restart() { s.t.Helper(); s.start(s.addr) }

// SetEnv replaces the extra KEY=VALUE pairs (Options.Env) the next Restart
// starts the process with; the running process keeps its own.
func (s *Server) SetEnv(env []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Env = env
}

// Pid is the running process's id, 0 when it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Logs returns what the process wrote so far.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// CreateKey runs `tokend keys create` and returns the printed key.
func CreateKey(t testing.TB, databaseURL, tenant, role string) string {
	t.Helper()
	cmd := exec.Command(Binary(t), "keys", "create", "--tenant", tenant, "--role", role)
	cmd.Env = append(os.Environ(), databaseEnv(databaseURL)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tokend keys create: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// databaseEnv is how a tokend process reaches databaseURL. scripts/test's
// deployment pass sets TOKEND_TEST_PGBOUNCER_ADDR: the process then goes
// through that PgBouncer in transaction pooling, as in production behind
// one, with its sessions (migrations, LISTEN) straight to Postgres. That
// PgBouncer fronts the shared test server only (TOKEND_TEST_DATABASE_URL's):
// a database on any other server (a throwaway cluster) is reached straight.
func databaseEnv(databaseURL string) []string {
	addr := os.Getenv("TOKEND_TEST_PGBOUNCER_ADDR")
	u, err := url.Parse(databaseURL)
	if addr == "" || err != nil || !onSharedServer(u) {
		return []string{"TOKEND_DATABASE_URL=" + databaseURL}
	}
	u.Host = addr
	return []string{"TOKEND_DATABASE_URL=" + u.String(), "TOKEND_DATABASE_POOLING=transaction",
		"TOKEND_DATABASE_SESSION_URL=" + databaseURL}
}

// onSharedServer reports whether u names the server PgBouncer fronts.
func onSharedServer(u *url.URL) bool {
	shared, err := url.Parse(os.Getenv("TOKEND_TEST_DATABASE_URL"))
	return err == nil && shared.Host != "" && shared.Host == u.Host
}

// WaitHealthy polls url's /healthz until it answers 200 or timeout passes.
func WaitHealthy(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
