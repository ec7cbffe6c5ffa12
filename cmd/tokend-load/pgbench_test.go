package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

const pgbenchOutput = `transaction type: bench/spend.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 3 s
number of transactions actually processed: 5123
number of failed transactions: 0 (0.000%)
latency average = 4.674 ms
initial connection time = 10.385 ms
tps = 1711.548231 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	r := parsePgbench(pgbenchOutput)
	if r.TPS != 1711.548231 || r.Processed != 5123 || r.Failed != 0 {
		t.Errorf("parsePgbench = tps %v processed %d failed %d, want 1711.548231 5123 0", r.TPS, r.Processed, r.Failed)
	}
}

func TestReadLatencyLogs(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "pgb.123")
	b := filepath.Join(dir, "pgb.123.1")
	if err := os.WriteFile(a, []byte("0 0 1500 0 1700000000 1\n0 1 500 0 1700000000 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("1 0 failed 0 1700000000 3\n1 1 2500 0 1700000000 4\nshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lat, err := readLatencyLogs([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond, 2500 * time.Microsecond}
	if len(lat) != len(want) {
		t.Fatalf("got %v, want %v", lat, want)
	}
	for i := range want {
		if lat[i] != want[i] {
			t.Fatalf("got %v, want %v", lat, want)
		}
	}
}
