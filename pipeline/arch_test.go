package pipeline

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/modelgen"
)

// TestRunEveryArch runs `confclip run` for two steps (rollout, score,
// export, train) on the tiny model of every generated family, and checks
// that both steps trained (a finite loss and a nonzero gradient) and left a
// checkpointed adapter.
func TestRunEveryArch(t *testing.T) {
	for _, arch := range modelgen.Archs {
		t.Run(arch, func(t *testing.T) {
			cfg := archFixture(t, arch)
			cfg.Run.Steps = 2
			// A pattern that random models of every family meet about as
			// often as not somewhere in six tokens, so that groups have
			// reward spread.
			cfg.Verifier.Pattern = `[a-m]`
			cfg.Run.EvalEvery = 0
			res, err := Run(context.Background(), RunOptions{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			var steps []metrics.Step // without step 0, the evaluation before training
			for _, r := range res.Rows {
				if r.Step > 0 {
					steps = append(steps, r)
				}
			}
			if len(steps) != 2 {
				t.Fatalf("%d training steps, want 2", len(steps))
			}
			trained := false
			for _, r := range steps {
				if math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) || math.IsNaN(r.GradNorm) {
					t.Fatalf("step %d: loss %g, gradient norm %g", r.Step, r.Loss, r.GradNorm)
				}
				trained = trained || r.GradNorm > 0
			}
			if !trained {
				t.Fatal("no step had a nonzero gradient (no reward spread in any group?)")
			}
			ck := filepath.Join(cfg.Run.Out, "checkpoints", "step-0002", "adapter.gguf")
			if _, err := os.Stat(ck); err != nil {
				t.Fatalf("no adapter checkpoint after two steps: %v", err)
			}
			t.Logf("ARCH %s run: step losses %.4g, %.4g; gradient norms %.3g, %.3g", arch, steps[0].Loss, steps[1].Loss, steps[0].GradNorm, steps[1].GradNorm)
		})
	}
}

// TestRunRefusesRecurrentArch: a run on a model training refuses (qwen35's
// recurrent layers) returns the refusal as an error, and closes what it
// opened (it once panicked closing a nil runner).
func TestRunRefusesRecurrentArch(t *testing.T) {
	for _, arch := range modelgen.RecurrentArchs {
		t.Run(arch, func(t *testing.T) {
			cfg := archFixture(t, arch)
			cfg.Run.Steps = 1
			res, err := Run(context.Background(), RunOptions{Config: cfg})
			if err == nil || !strings.Contains(err.Error(), arch) || !strings.Contains(err.Error(), "recurrent") {
				t.Fatalf("want the refusal naming %s and its recurrent layers, got %v (result %v)", arch, err, res)
			}
		})
	}
}

// archFixture is runFixture with its model replaced by arch's tiny model.
func archFixture(t *testing.T, arch string) Config {
	t.Helper()
	cfg := runFixture(t)
	s, err := modelgen.TinyArch(arch)
	if err != nil {
		t.Fatal(err)
	}
	if err := modelgen.Write(cfg.Model.Path, s); err != nil {
		t.Fatal(err)
	}
	return cfg
}
