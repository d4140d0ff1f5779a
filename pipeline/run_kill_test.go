package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/confclip/confclip/internal/crashpoint"
	"github.com/confclip/confclip/metrics"
)

// runInChild runs Run in a child process (the test binary, see TestMain)
// with crashpoint.Env set to crashAt ("" for none). It returns whether the child
// was killed by SIGKILL, and its error otherwise.
func runInChild(t *testing.T, cfg Config, resume bool, crashAt string) (killed bool, err error) {
	t.Helper()
	b, _ := json.Marshal(cfg)
	cfgPath := cfg.Run.Out + ".config.json"
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runChildEnv+"="+cfgPath, crashpoint.Env+"="+crashAt)
	if resume {
		cmd.Env = append(cmd.Env, runChildResume+"=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				return true, nil
			}
			t.Fatalf("the run died from %v:\n%s", ws.Signal(), out.String())
		}
		return false, fmt.Errorf("%v: %s", err, strings.TrimSpace(out.String()))
	}
	return false, err
}

// TestRunKilledAtEveryPhase kills `confclip run` (SIGKILL, from the
// crashpoint.Env hook) at every phase boundary of the loop, in step 1 and in a
// later step, resumes it with --resume, and checks that the metrics equal
// an uninterrupted run's, row for row (timings aside).
func TestRunKilledAtEveryPhase(t *testing.T) {
	cfg := runFixture(t)
	cfg.Run.Steps = 3
	whole, err := Run(context.Background(), RunOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	base := cfg.Run.Out
	var matrix []string
	for _, phase := range crashpoint.Phases {
		for _, n := range []int{1, 2} {
			at := fmt.Sprintf("%s@%d", phase, n)
			switch phase {
			case "run-folder-created", "init-adapter-written", "eval0-recorded":
				if n > 1 {
					continue // reached once per run
				}
			}
			t.Run(at, func(t *testing.T) {
				c := cfg
				c.Run.Out = base + "-" + strings.ReplaceAll(at, "@", "-")
				killed, err := runInChild(t, c, false, at)
				if err != nil || !killed {
					t.Fatalf("the run was not killed at %s (err %v)", at, err)
				}
				if _, err := runInChild(t, c, true, ""); err != nil {
					matrix = append(matrix, at+": resume FAILED")
					t.Fatalf("resume after a kill at %s: %v", at, err)
				}
				rows, err := metrics.Read(filepath.Join(c.Run.Out, metrics.JSONLFile))
				if err != nil {
					t.Fatal(err)
				}
				sameRunMetrics(t, whole.Rows, rows)
				// One checkpoint is left, the last step's.
				ents, _ := os.ReadDir(filepath.Join(c.Run.Out, "checkpoints"))
				if len(ents) != 1 || ents[0].Name() != fmt.Sprintf("step-%04d", c.Run.Steps) {
					var names []string
					for _, e := range ents {
						names = append(names, e.Name())
					}
					t.Errorf("checkpoints left: %v", names)
				}
				matrix = append(matrix, at+": killed, resumed, metrics equal")
			})
		}
	}
	t.Logf("kill-test matrix (phase@step: outcome):\n%s", strings.Join(matrix, "\n"))
}
