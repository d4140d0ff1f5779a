package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/testkit/testutil"
)

// runFixture is testutil.RunFixture's run, loaded as a user's config is.
func runFixture(t *testing.T) Config {
	t.Helper()
	return loadFixture(t, testutil.RunFixture(t))
}

// loadFixture loads a fixture's config file as a user's config is (as
// pipelinetest does for the packages above, which pipeline's tests cannot
// import).
func loadFixture(t *testing.T, path string) Config {
	t.Helper()
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sameMetrics compares everything but the timings.
func sameRunMetrics(t *testing.T, a, b []metrics.Step) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%d rows and %d rows", len(a), len(b))
	}
	eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	for i := range a {
		x, y := a[i], b[i]
		if x.Step != y.Step || !eq(x.Accuracy, y.Accuracy) || !eq(x.MeanReward, y.MeanReward) || !eq(x.RewardStd, y.RewardStd) ||
			!eq(x.ZeroStdFrac, y.ZeroStdFrac) || !eq(x.MeanTokens, y.MeanTokens) || !eq(x.Loss, y.Loss) || !eq(x.GradNorm, y.GradNorm) ||
			(x.EvalAccuracy == nil) != (y.EvalAccuracy == nil) || (x.EvalAccuracy != nil && *x.EvalAccuracy != *y.EvalAccuracy) {
			t.Fatalf("step %d differs:\n%+v\n%+v", x.Step, x, y)
		}
	}
}

func TestRunResumesExactly(t *testing.T) {
	cfg := runFixture(t)
	ctx := context.Background()
	plots := 0 // the plotter is called after every step and at the end
	plot := func(c Config, rows []metrics.Step, dir string) ([]string, error) {
		plots++
		return []string{filepath.Join(dir, fmt.Sprintf("rows-%d", len(rows)))}, nil
	}
	whole, err := Run(ctx, RunOptions{Config: cfg, Plot: plot})
	if err != nil {
		t.Fatal(err)
	}
	trained := false
	for _, r := range whole.Rows {
		trained = trained || (r.GradNorm > 0 && !math.IsNaN(r.GradNorm))
	}
	if !trained {
		t.Fatal("the fixture never trained (no reward spread): the test would prove nothing")
	}
	if len(whole.Rows) != cfg.Run.Steps+1 || whole.Before == nil || whole.After == nil || plots != cfg.Run.Steps+1 ||
		!slices.Equal(whole.Plots, []string{filepath.Join(cfg.Run.Out, "plots", fmt.Sprintf("rows-%d", cfg.Run.Steps+1))}) {
		t.Fatalf("rows %d, before %v, after %v, plotter called %d times, plots %v", len(whole.Rows), whole.Before, whole.After, plots, whole.Plots)
	}

	// The same run, stopped after two steps, then killed in the middle of
	// the third (half its files written, half a metrics line), then resumed.
	cfg.Run.Out += "-resumed"
	if _, err := Run(ctx, RunOptions{Config: cfg, StopAfter: 2}); !errors.Is(err, ErrStopped) {
		t.Fatalf("stop after 2: %v", err)
	}
	half := filepath.Join(cfg.Run.Out, "steps", "0003")
	os.MkdirAll(half, 0o755)
	os.WriteFile(filepath.Join(half, "rollouts.jsonl"), []byte(`{"prompt_id":"tr`), 0o644)
	f, _ := os.OpenFile(filepath.Join(cfg.Run.Out, metrics.JSONLFile), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"step":3,"accur`)
	f.Close()
	if _, err := Run(ctx, RunOptions{Config: cfg}); err == nil {
		t.Fatal("starting over an existing run without --resume must be an error")
	}
	resumed, err := Run(ctx, RunOptions{Config: cfg, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Resumed != 2 {
		t.Fatalf("resumed from step %d, want 2", resumed.Resumed)
	}
	sameRunMetrics(t, whole.Rows, resumed.Rows)
	rows, err := metrics.Read(filepath.Join(cfg.Run.Out, metrics.JSONLFile))
	if err != nil {
		t.Fatal(err)
	}
	sameRunMetrics(t, whole.Rows, rows)

	// Resuming with fewer steps than the run has done says so and leaves
	// the folder as it was.
	before, _ := os.ReadFile(filepath.Join(cfg.Run.Out, RunConfigFile))
	short := cfg
	short.Run.Steps = 2
	if _, err := Run(ctx, RunOptions{Config: short, Resume: true}); err == nil || !strings.Contains(err.Error(), "has done 4 steps") {
		t.Fatalf("resume with steps below the steps done: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.Run.Out, RunConfigFile)); string(after) != string(before) {
		t.Fatalf("a refused resume rewrote %s", RunConfigFile)
	}

	// A changed configuration does not resume.
	cfg.Train.LR *= 2
	if _, err := Run(ctx, RunOptions{Config: cfg, Resume: true}); err == nil {
		t.Fatal("resuming with another configuration must be an error")
	}
}

// TestRunEvalProgress: the held-out evaluations of a run (step 0, every
// eval_every steps, the last) send EvalProgress events, one per prompt, up
// to the prompts of the eval file, each after the stage that announces it.
func TestRunEvalProgress(t *testing.T) {
	cfg := runFixture(t)
	cfg.Run.Steps = 2
	cfg.Run.EvalEvery = 2
	type key struct{ step, groups int }
	var got []EvalProgress
	stage := ""
	_, err := Run(context.Background(), RunOptions{Config: cfg, Progress: func(e Event) {
		switch e := e.(type) {
		case RunStage:
			stage = e.Stage
		case EvalProgress:
			if e.Step > 0 && stage != "held-out evaluation" {
				t.Errorf("an EvalProgress event in stage %q: %+v", stage, e)
			}
			got = append(got, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Steps 0 and 2, three prompts each, greedy.
	var want []key
	for _, step := range []int{0, 2} {
		for g := 1; g <= 3; g++ {
			want = append(want, key{step, g})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d EvalProgress events, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if (key{e.Step, e.Groups}) != want[i] || e.Total != 3 || e.Steps != 2 || e.Phase != "greedy" {
			t.Fatalf("event %d: %+v, want step %d, %d/3 greedy of 2 steps", i, e, want[i].step, want[i].groups)
		}
	}
}

// TestRunConfidenceRewards: the loop runs with each reward that reads more
// than the verdict — answer_prob (the engine teacher-forces the reference
// after each completion's reasoning), self_certainty (the rollouts'
// self_certainties) and rlcr (stated confidences: none here, so every
// completion gets RLCRMissing and nothing trains) — and RLPR's std filter
// sets a threshold from step 2 on.
func TestRunConfidenceRewards(t *testing.T) {
	for _, method := range []string{"answer_prob", "self_certainty", "rlcr"} {
		t.Run(method, func(t *testing.T) {
			cfg := runFixture(t)
			cfg.Reward.Method = method
			cfg.Run.Steps, cfg.Run.EvalEvery = 2, 0
			cfg.Advantage.StdFilterBeta = 0.5
			res, err := Run(context.Background(), RunOptions{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			// rows: step 0's evaluation, then steps 1 and 2
			if len(res.Rows) != 3 || res.Rows[1].StdFilter != 0 || res.Rows[2].StdFilter != 0.5*res.Rows[1].GroupStdMean {
				t.Fatalf("steps %+v", res.Rows)
			}
			recs, _, _, err := dataset.ReadFile[dataset.Scored](filepath.Join(cfg.Run.Out, "steps", "0001", "scored.jsonl"), false)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				switch {
				case method == "answer_prob" && (r.AnswerProb == nil || r.AnswerProbBase == nil || r.Reward != answerProbReward(r)):
					t.Fatalf("answer_prob record: %v %v reward %v", r.AnswerProb, r.AnswerProbBase, r.Reward)
				case method == "self_certainty" && (r.SelfCertainty == nil || r.Reward != *r.SelfCertainty || len(r.SelfCertainties) != len(r.Tokens)):
					t.Fatalf("self_certainty record: %v reward %v", r.SelfCertainty, r.Reward)
				case method == "rlcr" && r.Reward != -2:
					t.Fatalf("rlcr record without a stated confidence: reward %v", r.Reward)
				}
			}
		})
	}
}

// answerProbReward is reward answer_prob's value for a scored record: the
// reference's debiased probability, or 0 when the completion states no
// answer (no answer span).
func answerProbReward(r dataset.Scored) float64 {
	if r.VerifierResult.AnswerSpan == nil {
		return 0
	}
	return math.Max(*r.AnswerProb-*r.AnswerProbBase, 0)
}
