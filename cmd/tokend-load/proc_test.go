package main

import (
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestProcSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	pid := os.Getpid()
	cpu0, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's 10ms tick has counted some of it.
	deadline := time.Now().Add(5 * time.Second)
	var cpu1 time.Duration
	sink := 1
	for cpu1 <= cpu0 && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			sink = sink*31 + i
		}
		if cpu1, err = procCPU(pid); err != nil {
			t.Fatal(err)
		}
	}
	_ = sink
	if cpu1 <= cpu0 {
		t.Fatalf("CPU time did not grow: %v then %v", cpu0, cpu1)
	}

	// The machine's CPU time grows while this process burns CPU. It is
	// counted by the tick, not per process, so it is read until it moves.
	m0, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	m1 := m0
	for machineDeadline := time.Now().Add(5 * time.Second); m1 <= m0 && time.Now().Before(machineDeadline); {
		for i := range 1_000_000 {
			sink = sink*31 + i
		}
		if m1, err = machineCPU(); err != nil {
			t.Fatal(err)
		}
	}
	if m1 <= m0 {
		t.Fatalf("the machine's CPU time did not grow in 5s of this process using CPU: %v then %v", m0, m1)
	}
	if got := perOp(m0, m0+time.Second, nil, nil, 4); got != 250_000 {
		t.Errorf("perOp of 1s over 4 ops = %v µs, want 250000", got)
	}
	if got := perOp(m0, m1, nil, os.ErrNotExist, 4); got != 0 {
		t.Errorf("perOp with a failed reading = %v, want 0", got)
	}

	if err := resetPeakRSS(pid); err != nil {
		t.Logf("clear_refs: %v (peak RSS is then since start)", err)
	}
	kb, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	// A Go test binary's peak RSS is megabytes, not bytes and not terabytes.
	if kb < 1024 || kb > 64<<20 {
		t.Fatalf("peak RSS %d KiB", kb)
	}
}

func TestProcNoSuchPID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Above the kernel's pid_max limit (2^22), so never a live process.
	const pid = 1<<22 + 1
	if _, err := procCPU(pid); err == nil {
		t.Error("procCPU of a missing process succeeded")
	}
	if _, err := peakRSS(pid); err == nil {
		t.Error("peakRSS of a missing process succeeded")
	}
}

func TestTCPConnsToCountsEstablishedConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	before := tcpConnsTo(port)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, s)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The server's side of each: its local port is the listener's.
	if got := tcpConnsTo(port) - before; got != 3 {
		t.Errorf("tcpConnsTo(%d) counted %d new connections, want 3", port, got)
	}
}
