package rollout

import (
	"runtime"

	"github.com/confclip/confclip/llama"
)

// ParamsPerThread is how many model parameters one more decoding thread
// needs before it pays for itself. A decode step's work grows with the
// parameters while the threads' synchronisation (a barrier per graph node)
// does not: on a small model the second thread only adds waiting, and on a
// shared machine a thread that is descheduled holds the others at every
// barrier. BenchmarkThreads measures generation with one thread against all
// cores over a ladder of model sizes: on 2 cores (load average 7) one thread
// won up to 5.2M parameters and two from 15.9M, so two threads start at
// 2 x 5M (docs/training-speed.md). More cores than two are given the same
// share per thread, which is not measured.
const ParamsPerThread = 5_000_000

// DefaultThreads is the thread count for a model when none is given: one
// thread per ParamsPerThread parameters, at least one and at most the
// machine's cores.
func DefaultThreads(m *llama.Model) int {
	return threadsFor(m.Info().Params, runtime.NumCPU())
}

func threadsFor(params uint64, cores int) int {
	n := int(params / ParamsPerThread)
	return max(1, min(n, cores))
}
