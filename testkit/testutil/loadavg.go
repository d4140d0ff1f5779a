package testutil

import (
	"os"
	"strings"
)

// LoadAverage is /proc/loadavg's first three fields, or "unknown": the
// benchmarks print it beside their rates.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
