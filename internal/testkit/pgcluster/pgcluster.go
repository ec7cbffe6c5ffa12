// Package pgcluster starts throwaway Postgres servers for tests: a
// cluster of one test's own, for faults that must never reach the shared
// server other tests use (a restart, a kill).
package pgcluster

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

// Cluster is a throwaway Postgres server of one test's own.
type Cluster struct {
	t      testing.TB
	bindir string
	dir    string
	Port   int
	runAs  string // initdb refuses root: run as postgres then
}

// Start initdb's a cluster in a fresh directory and starts it on a
// free loopback port, trust auth for superuser postgres; it is removed when
// t ends. Without server binaries t is skipped.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bindir := pgBindir()
	if bindir == "" {
		t.Skip("no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or on PATH")
	}
	c := &Cluster{t: t, bindir: bindir}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
	}
	var err error
	if c.dir, err = os.MkdirTemp("", "tokend-robust-pg-"); err != nil {
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
	// Commits stay synchronous: even an immediate restart loses nothing a
	// client was told had committed.
	conf := "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nfull_page_writes = off\nmax_connections = 200\n"
	if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), conf); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.Port = FreePort(t)
		if err = c.pgctl("-l", c.log(), "-o", "-p "+strconv.Itoa(c.Port), "start"); err == nil {
			return c
		}
	}
	t.Fatalf("pg_ctl start: %v", err)
	return nil
}

// URL is the superuser's URL of database db.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Restart is `pg_ctl restart -m mode` (fast, immediate).
func (c *Cluster) Restart(mode string) error { return c.pgctl("-l", c.log(), "-m", mode, "restart") }

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }
func (c *Cluster) log() string  { return filepath.Join(c.dir, "postgres.log") }

func (c *Cluster) pgctl(args ...string) error {
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

func (c *Cluster) command(name string, args ...string) *exec.Cmd {
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

func (c *Cluster) remove() {
	if c.t.Failed() {
		c.t.Logf("throwaway postgres logs:\n%s", c.logTail())
	}
	if _, err := os.Stat(filepath.Join(c.data(), "postmaster.pid")); err == nil {
		if err := c.pgctl("-m", "immediate", "stop"); err != nil {
			c.t.Errorf("stop throwaway postgres: %v", err)
		}
	}
	_ = os.RemoveAll(c.dir)
}

func (c *Cluster) logTail() string {
	var b bytes.Buffer
	for _, name := range []string{"pg_ctl.log", "postgres.log"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	return b.String()
}

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

// FreePort is a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
