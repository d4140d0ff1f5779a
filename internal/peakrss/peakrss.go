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
