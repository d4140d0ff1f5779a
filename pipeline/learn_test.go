package pipeline

import (
	"context"
	"maps"
	"testing"
)

// TestRLLearnsFormat is the learnability check of the whole loop: on the
// generated tiny model (random weights), a format reward that a quarter to
// a third of the sampled completions already meet (the completion starts
// with a lower-case letter: 26 of the 83 pieces) must climb to a batch
// reward of at least 0.9 within a fixed number of steps (it gets there at
// step 25 of 40 with lr 2e-2). Everything is seeded, so the run is
// the same every time; if it ever fails, the update is broken (a sign
// flip, a lost gradient, a stale adapter in the rollouts).
func TestRLLearnsFormat(t *testing.T) {
	cfg := runFixture(t)
	cfg.Verifier.Pattern = `^\s*[a-z]`
	cfg.Reward.Method = "binary"
	cfg.Rollout.Group = 8
	cfg.Rollout.MaxTokens = 3
	cfg.Train.LR = 2e-2
	cfg.Run.Steps = 40
	cfg.Run.PromptsPerStep = 6
	cfg.Run.EvalEvery = 0
	cfg.Data.Eval = ""
	const target, steps = 0.9, 40
	res, err := Run(context.Background(), RunOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	first := res.Rows[0]
	if first.MeanReward < 0.2 || first.MeanReward > 0.5 {
		t.Fatalf("step 1 batch reward %.3f: the fixture should start near a third", first.MeanReward)
	}
	reached := 0
	for _, r := range res.Rows {
		t.Logf("step %d: batch reward %.3f, zero-std %.2f, grad norm %.3g", r.Step, r.MeanReward, r.ZeroStdFrac, r.GradNorm)
		if reached == 0 && r.MeanReward >= target {
			reached = r.Step
		}
	}
	if reached == 0 {
		t.Fatalf("batch reward %.3f -> %.3f: never reached %.1f in %d steps", first.MeanReward, res.Rows[len(res.Rows)-1].MeanReward, target, steps)
	}
	t.Logf("batch reward %.3f at step 1 reached %.1f at step %d", first.MeanReward, target, reached)
}

// TestRunBeforeFrom: an experiment's runs share their evaluation before
// training. Evaluating again with another adapter seed gives the same
// verdicts (a new adapter has B = 0, so it changes no logit), which is what
// makes reusing it right; a reused evaluation brings its files along.
func TestRunBeforeFrom(t *testing.T) {
	cfg := runFixture(t)
	cfg.Run.Steps, cfg.Run.EvalEvery = 1, 1
	first := cfg
	first.Run.Out = cfg.Run.Out + "-a"
	if _, err := Run(context.Background(), RunOptions{Config: first}); err != nil {
		t.Fatal(err)
	}
	again := cfg
	again.Run.Out, again.Train.Seed = cfg.Run.Out+"-b", 99
	if _, err := Run(context.Background(), RunOptions{Config: again}); err != nil {
		t.Fatal(err)
	}
	a, err := EvalVerdicts(first.Run.Out, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EvalVerdicts(again.Run.Out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(a, b) {
		t.Fatalf("step-0 verdicts differ between adapter seeds: %v and %v", a, b)
	}
	reuse := cfg
	reuse.Run.Out = cfg.Run.Out + "-c"
	res, err := Run(context.Background(), RunOptions{Config: reuse, BeforeFrom: first.Run.Out})
	if err != nil {
		t.Fatal(err)
	}
	c, err := EvalVerdicts(reuse.Run.Out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(a, c) || res.Before == nil || res.Rows[0].EvalAccuracy == nil {
		t.Fatalf("reused step 0: verdicts %v (want %v), before %+v", c, a, res.Before)
	}
}
