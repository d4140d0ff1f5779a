// Package peakrss reads the process's peak resident memory.
package peakrss

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Bytes is this process's peak resident memory in bytes (VmHWM in
// /proc/self/status), or 0 where there is no such file. Unlike the rusage a
// parent reads of its child, it counts this program only: Go starts a child
// sharing the parent's memory until exec, and Linux adds the parent's peak to
// the child's ru_maxrss.
func Bytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// Reset sets the peak to the memory resident now (Linux: "5" written to
// /proc/self/clear_refs), so that Bytes then gives the peak of what runs
// after; an error where the kernel has no such file.
func Reset() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}
