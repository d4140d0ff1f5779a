// Package crashpoint kills the process at named points of the run loop, for
// the resumption tests (Env).
package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env names a point of the run loop at which the process kills itself
// with SIGKILL, as a power cut or kill -9 would: "phase" or "phase@n" (the
// n-th time the phase is reached). The resumption tests run `confclip run`
// in a child process with it set and check that --resume ends with the
// metrics of an uninterrupted run. Unset, it costs one map lookup per phase.
const Env = "CONFCLIP_TEST_CRASH_AT"

// Phases are the points At is called at, in the order a run
// reaches them.
var Phases = []string{
	"run-folder-created",   // config.toml written, nothing else
	"init-adapter-written", // the new adapter is on disk
	"eval0-recorded",       // the step-0 evaluation's metrics row is written
	"step-start",           // a step begins (nothing of it on disk)
	"step-trained",         // rollouts, scores, export and training done; nothing recorded
	"metrics-recorded",     // the step's metrics row is written, its checkpoint not yet
	"checkpoint-files",     // the checkpoint's files are in the temporary folder
	"checkpoint-renamed",   // the checkpoint folder is in place, checkpoint.json not yet
	"checkpoint-recorded",  // checkpoint.json names it, the previous one not yet removed
	"step-done",            // the step is complete
}

var crash struct {
	once  sync.Once
	phase string
	n     int
	seen  map[string]int
	mu    sync.Mutex
}

// At kills the process when Env names this phase (and count).
func At(phase string) {
	crash.once.Do(func() {
		v := os.Getenv(Env)
		if v == "" {
			return
		}
		crash.phase, crash.n = v, 1
		if p, n, ok := strings.Cut(v, "@"); ok {
			crash.phase = p
			k, err := strconv.Atoi(n)
			if err != nil || k < 1 {
				// A test hook: a bad value is the test's bug, and a crash
				// at no point would pass it silently.
				panic(fmt.Sprintf("%s=%q: want phase or phase@N with N >= 1", Env, v))
			}
			crash.n = k
		}
		crash.seen = map[string]int{}
	})
	if crash.phase != phase {
		return
	}
	crash.mu.Lock()
	crash.seen[phase]++
	hit := crash.seen[phase] == crash.n
	crash.mu.Unlock()
	if hit {
		syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck // signalling itself cannot fail
		select {}                                  // the signal is on its way
	}
}
