package faults

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cluster is a throwaway Postgres server of one test's own, for faults that
// must not reach the shared server other tests use (a restart).
type cluster struct {
	t      testing.TB
	bindir string // initdb, pg_ctl
	dir    string // owned by the server's OS user: data/ and the logs
	port   int
	// runAs is the OS user to run the server as when the test runs as root
	// (initdb refuses root), "" to run as ourselves.
	runAs string
}

// startCluster initdb's a cluster in a fresh directory and starts it on a
// free loopback port, with trust auth for superuser postgres. It is stopped
// and removed when t ends. Without server binaries the test is skipped.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	bindir := pgBindir()
	if bindir == "" {
		t.Skip("no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH")
	}
	c := &cluster{t: t, bindir: bindir}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
	}
	var err error
	if c.dir, err = os.MkdirTemp("", "tokend-faults-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.remove)
	if c.runAs != "" {
		if err := chownTo(c.dir, c.runAs); err != nil {
			t.Skipf("cannot hand %s to OS user %s to run initdb as: %v", c.dir, c.runAs, err)
		}
	}

	if out, err := c.command("initdb", "-D", c.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''",
		// a test cluster: durability is worthless, speed is not
		// (but commits stay synchronous, so even an immediate restart loses
		// nothing a client was told had committed)
		"fsync = off", "full_page_writes = off",
	}, "\n")
	if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), "\n"+conf+"\n"); err != nil {
		t.Fatal(err)
	}

	// A free port can be taken between our probe and the server's bind.
	for range 3 {
		c.port = freePort(t)
		if err = c.pgctl("-l", c.log(), "-o", "-p "+strconv.Itoa(c.port), "start"); err == nil {
			return c
		}
	}
	t.Fatalf("pg_ctl start: %v", err)
	return nil
}

// URL is the superuser's URL of database db.
func (c *cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// restart is `pg_ctl restart -m mode`: sessions are ended, open
// transactions roll back, and the server comes back on the same port.
func (c *cluster) restart(mode string) error {
	return c.pgctl("-l", c.log(), "-m", mode, "restart")
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }
func (c *cluster) log() string  { return filepath.Join(c.dir, "postgres.log") }

// pgctl runs pg_ctl on the cluster, waiting (bounded) for the action to end.
// Its output, and that of a server it starts, goes to pg_ctl.log: a pipe
// would be held open by the server and never reach EOF.
func (c *cluster) pgctl(args ...string) error {
	out, err := os.OpenFile(filepath.Join(c.dir, "pg_ctl.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := c.command("pg_ctl", append([]string{"-D", c.data(), "-w", "-t", "60"}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", strings.Join(args, " "), err, c.logTail())
	}
	return nil
}

// command runs one of the server binaries as the cluster's OS user, from /
// (the user may not be able to enter our working directory).
func (c *cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bindir, name)
	var cmd *exec.Cmd
	if c.runAs != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/"
	return cmd
}

// remove stops the server, if it runs, and deletes its directory.
func (c *cluster) remove() {
	if c.t.Failed() {
		c.t.Logf("throwaway postgres logs:\n%s", c.logTail())
	}
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); err == nil {
		if err := c.pgctl("-m", "immediate", "stop"); err != nil {
			c.t.Errorf("stop throwaway postgres: %v", err)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Errorf("remove throwaway postgres: %v", err)
	}
}

// logTail is the end of the server's and pg_ctl's logs.
func (c *cluster) logTail() string {
	var b bytes.Buffer
	for _, name := range []string{"pg_ctl.log", "postgres.log"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return b.String()
}

// pgBindir is the newest /usr/lib/postgresql/*/bin with initdb and pg_ctl,
// else the directory of pg_ctl on PATH, else "".
func pgBindir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(version(b), version(a)) })
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if d := filepath.Dir(p); isExecutable(filepath.Join(d, "initdb")) {
			return d
		}
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func chownTo(path, username string) error {
	u, err := user.Lookup(username)
	if err != nil {
		return err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return err
	}
	return os.Chown(path, uid, gid)
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
