package robust

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pgbouncerPath is the pgbouncer binary: on PATH, or where Debian's package
// puts it (/usr/sbin, often not on a test's PATH); "" when neither.
func pgbouncerPath() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// PgBouncer is a PgBouncer of the kit's own, in transaction pooling, in
// front of one Postgres server, as scripts/lib.sh's start_pgbouncer
// configures the deployment pass's. It runs in the foreground as a child
// of the test, so a signal reaches PgBouncer itself.
type PgBouncer struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cred *syscall.Credential // PgBouncer refuses to run as root: postgres then

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartPgBouncer starts PgBouncer before the server at pgHostPort; it is
// stopped when t ends. t is skipped when pgbouncer is not installed.
func StartPgBouncer(t testing.TB, pgHostPort string) *PgBouncer {
	t.Helper()
	b := &PgBouncer{t: t, bin: pgbouncerPath()}
	if b.bin == "" {
		t.Skip("pgbouncer is not installed (not on PATH, not /usr/sbin/pgbouncer)")
	}
	host, pgPort, err := net.SplitHostPort(pgHostPort)
	if err != nil {
		t.Fatal(err)
	}
	if b.dir, err = os.MkdirTemp("", "tokend-robust-pgbouncer-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Kill(); _ = os.RemoveAll(b.dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 40
logfile = %s
`, host, pgPort, b.port, filepath.Join(b.dir, "users.txt"), filepath.Join(b.dir, "pgbouncer.log"))
	if err := os.WriteFile(filepath.Join(b.dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.ini(), []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no OS user postgres to run PgBouncer as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		b.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(b.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{b.dir, b.ini(), filepath.Join(b.dir, "users.txt")} {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.Restart(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *PgBouncer) ini() string { return filepath.Join(b.dir, "pgbouncer.ini") }

// Addr is host:port PgBouncer listens on.
func (b *PgBouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// Restart starts PgBouncer (again) and waits until it accepts connections.
func (b *PgBouncer) Restart() error {
	cmd := exec.Command(b.bin, b.ini())
	cmd.Dir = b.dir
	if b.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: b.cred}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start pgbouncer: %w", err)
	}
	b.mu.Lock()
	b.cmd = cmd
	b.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", b.Addr(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
			return fmt.Errorf("pgbouncer not listening on %s after 10s: %v\n%s", b.Addr(), err, tail(string(log), 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends sig (SIGINT: PgBouncer's safe shutdown, which waits for the
// transactions in flight; SIGTERM: its immediate shutdown; SIGKILL) and
// waits for it to exit, killing it after 10 s.
func (b *PgBouncer) Stop(sig syscall.Signal) {
	b.mu.Lock()
	cmd := b.cmd
	b.cmd = nil
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Kill is Stop(SIGKILL).
func (b *PgBouncer) Kill() { b.Stop(syscall.SIGKILL) }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
