//go:build unix

package verifiers

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system, all threads) this process
// has used. Benchmarks report it beside the wall time, which on a shared,
// loaded machine measures the load more than the code.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
