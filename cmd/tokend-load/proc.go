package main

import (
	"fmt"
	"math"
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// procCPU returns the CPU time (user + system) process pid has used.
func procCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(math.Round(st.CPUTime() * float64(time.Second))), nil
}

// machineCPU returns the CPU time all processes of the machine have used
// since boot, over all CPUs: everything but idle and I/O wait.
func machineCPU() (time.Duration, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, err
	}
	c := st.CPUTotal
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return time.Duration(math.Round(busy * float64(time.Second))), nil
}

// perOp is the CPU time between two readings per operation, in
// microseconds; zero when either reading failed or nothing was done.
func perOp(t0, t1 time.Duration, err0, err1 error, ops int64) float64 {
	if err0 != nil || err1 != nil || ops <= 0 || t1 < t0 {
		return 0
	}
	return float64((t1-t0)/time.Microsecond) / float64(ops)
}

// resetPeakRSS resets VmHWM of pid to its current RSS (Linux 4.0 and later).
// procfs only reads /proc, so this writes clear_refs itself.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS returns VmHWM of pid in KiB.
func peakRSS(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	s, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	if s.VmHWM == 0 {
		// A kernel thread, or a process that has exited into a zombie.
		return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return int64(s.VmHWM / 1024), nil
}

// tcpConnsTo counts the established TCP connections whose local port is
// port (tokend's, on this machine), IPv4 and IPv6; 0 when unreadable.
func tcpConnsTo(port int) int64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil || port == 0 {
		return 0
	}
	const established = 1
	var n int64
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if err != nil {
			continue
		}
		for _, l := range lines {
			if l.St == established && l.LocalPort == uint64(port) {
				n++
			}
		}
	}
	return n
}
