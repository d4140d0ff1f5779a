package pipeline

import (
	"context"
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
