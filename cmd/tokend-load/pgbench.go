package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pgbench runs the reference scripts of bench/ against the bench database.
type pgbench struct {
	path string // the pgbench binary
	db   string // connection URL of the bench database
	dir  string // directory holding spend.sql, issue.sql, lookup.sql
}

// pgbenchResult is what one pgbench run measured.
type pgbenchResult struct {
	Clients   int
	TPS       float64 // as pgbench reports it, without connection time
	Processed int64
	Failed    int64
	Latencies []time.Duration // per transaction, sorted (from -l logs)
	Aborted   bool            // a client aborted (pgbench exit status 2)
	Stderr    string          // the end of pgbench's stderr, when aborted
}

// run runs script (a file name in p.dir) with clients connections for secs
// seconds, -M prepared, and -D for each of vars. Threads are min(2, clients),
// as the comparison with tokend on a 2-core machine calls for.
func (p *pgbench) run(ctx context.Context, script string, clients, secs int, vars map[string]string) (pgbenchResult, error) {
	logDir, err := os.MkdirTemp("", "tokend-pgbench-")
	if err != nil {
		return pgbenchResult{}, err
	}
	defer os.RemoveAll(logDir)

	args := []string{
		"-M", "prepared", "-n",
		"-f", filepath.Join(p.dir, script),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(2, clients)),
		"-T", strconv.Itoa(secs),
		"-l", "--log-prefix", filepath.Join(logDir, "pgb"),
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-D", k+"="+vars[k])
	}
	args = append(args, p.db)

	cmd := exec.CommandContext(ctx, p.path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	r := parsePgbench(stdout.String())
	r.Clients = clients
	if runErr != nil {
		ee, ok := runErr.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			return r, fmt.Errorf("pgbench %s: %v: %s", script, runErr, tail(stderr.String(), 800))
		}
		r.Aborted = true
		r.Stderr = tail(stderr.String(), 800)
	}
	logs, _ := filepath.Glob(filepath.Join(logDir, "pgb*"))
	if r.Latencies, err = readLatencyLogs(logs); err != nil {
		return r, err
	}
	return r, nil
}

var (
	tpsRE       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	processedRE = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	failedRE    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
)

// parsePgbench reads tps and transaction counts from pgbench's report.
func parsePgbench(out string) pgbenchResult {
	var r pgbenchResult
	if m := tpsRE.FindStringSubmatch(out); m != nil {
		r.TPS, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := processedRE.FindStringSubmatch(out); m != nil {
		r.Processed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := failedRE.FindStringSubmatch(out); m != nil {
		r.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return r
}

// readLatencyLogs reads pgbench -l per-transaction logs, whose lines are
// "client_id transaction_no time script_no time_epoch time_us" with time the
// latency in microseconds, and returns the latencies sorted. Lines of failed
// transactions (time "failed" or "serialization"/"deadlock") are skipped.
func readLatencyLogs(files []string) ([]time.Duration, error) {
	var lat []time.Duration
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
