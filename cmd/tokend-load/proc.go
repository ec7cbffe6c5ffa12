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
