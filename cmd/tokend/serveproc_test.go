package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// servedProcess is a `tokend serve --listen 127.0.0.1:0` a test started,
// with what it logged.
type servedProcess struct {
	cmd  *exec.Cmd
	base string // http://host:port, from its "listening" line
	logs strings.Builder
	rest chan string // the log after the "listening" line, once stderr ends
}

// startServe starts cmd and waits for its "listening" line; the process is
// killed at cleanup if the test ended before stop.
func startServe(t *testing.T, cmd *exec.Cmd) *servedProcess {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	p := &servedProcess{cmd: cmd, rest: make(chan string, 1)}
	lines := bufio.NewScanner(stderr)
	var addr string
	for addr == "" && lines.Scan() {
		p.logs.WriteString(lines.Text() + "\n")
		var entry struct{ Msg, Addr string }
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == "listening" {
			addr = entry.Addr
		}
	}
	if addr == "" {
		t.Fatalf("serve never said where it listens:\n%s", p.logs.String())
	}
	go func() {
		b, _ := io.ReadAll(stderr)
		p.rest <- string(b)
	}()
	p.base = "http://" + addr
	return p
}

// stop sends SIGTERM and returns the whole log and Wait's error. The log is
// read to its end first: Wait closes the pipe, and a line still in it would
// be cut (os/exec: no Wait before the reads are done).
func (p *servedProcess) stop() (string, error) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return p.logs.String(), err
	}
	p.logs.WriteString(<-p.rest)
	err := p.cmd.Wait()
	return p.logs.String(), err
}
