//go:build !unix

package verifiers

import "time"

// processCPU is not measured here; benchmarks then leave out the CPU metric.
func processCPU() time.Duration { return 0 }
