package train

import (
	"context"
	"math"
	"testing"
)

// offPolicy gives the examples old log-probs away from the current ones
// (ratios 1.65, 1, 0.95 and 0.61 in turn: inside and outside the clip band
// [0.8, 1.28], away from its edges) and returns them.
func offPolicy(t *testing.T, tr *Trainer, exs []Example) []Example {
	t.Helper()
	cur, err := tr.LogProbs(exs)
	if err != nil {
		t.Fatal(err)
	}
	shift := []float32{-0.5, 0, 0.05, 0.5}
	out := append([]Example(nil), exs...)
	k := 0
	for i := range out {
		old := make([]float32, len(cur[i]))
		for j, c := range cur[i] {
			old[j] = c + shift[k%len(shift)]
			k++
		}
		out[i].OldLogProbs = old
	}
	return out
}

// TestObjectiveGradientCheck checks the gradient of the whole objective
// (clipped ratio against old log-probs, k3 KL to the model without the
// adapter, token_mean) through the model: the training evaluation with
// per-token weights must give the finite-difference derivative of
// METHOD.md's L in the adapter's parameters.
func TestObjectiveGradientCheck(t *testing.T) {
	m := load(t, false)
	for _, agg := range []string{TokenMean, SeqMeanTokenMean} {
		t.Run(agg, func(t *testing.T) {
			a := newAdapter(t, m, true)
			cfg := testConfig()
			cfg.LossAgg, cfg.Epsilon, cfg.EpsilonHigh, cfg.Beta = agg, 0.2, 0.28, 0.3
			tr, err := NewLoRATrainer(m, a, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			exs := offPolicy(t, tr, examples(t, m))
			exs[1].Masked = true
			st, err := tr.Gradient(context.Background(), exs)
			if err != nil {
				t.Fatal(err)
			}
			if st.ClipFrac == 0 || st.KL <= 0 || st.Forwards != 2 {
				t.Fatalf("clip fraction %g, KL %g, %d extra forwards: want some clipping, a positive KL and 2 forwards (reference, current)", st.ClipFrac, st.KL, st.Forwards)
			}
			if _, err := tr.Gradient(context.Background(), exs); err != nil {
				t.Fatal(err)
			}
			analytic := make([][]float32, len(tr.grads))
			for j, g := range tr.grads {
				analytic[j] = append([]float32(nil), g...)
			}
			objective := func() float64 {
				s, err := tr.Gradient(context.Background(), exs)
				if err != nil {
					t.Fatal(err)
				}
				return s.Objective
			}
			// a third of the tensors keeps the test short
			worst := fdCheck(t, tr.params, analytic, objective, func(j int) bool { return j%3 == 0 }, 2, 1e-2, 2e-3)
			t.Logf("objective gradient check (%s, clip fraction %.2f, KL %.4f): worst relative error %.3g", agg, st.ClipFrac, st.KL, worst)
		})
	}
}

// TestZeroAdvantageStepSkipped: a batch whose advantages are all zero does
// not move the adapter, not even through AdamW's momentum from the steps
// before (which the old Step applied regardless), and says so.
func TestZeroAdvantageStepSkipped(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	exs := examples(t, m)
	if _, err := tr.Step(context.Background(), exs); err != nil { // builds momentum
		t.Fatal(err)
	}
	before, state := snapshot(tr), tr.step
	zero := append([]Example(nil), exs...)
	for i := range zero {
		zero[i].Advantage = 0
	}
	zero[0].Advantage, zero[0].Masked = 3, true // a masked completion carries no signal either
	st, err := tr.Step(context.Background(), zero)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Skipped {
		t.Error("an all-zero-advantage step is not reported as skipped")
	}
	for j, v := range snapshot(tr) {
		for k := range v {
			if v[k] != before[j][k] {
				t.Fatalf("an all-zero-advantage step moved %s[%d]: %g -> %g", tr.params[j].Name, k, before[j][k], v[k])
			}
		}
	}
	if tr.step != state {
		t.Errorf("the optimiser's step count moved %d -> %d", state, tr.step)
	}
}

// TestUpdateIterations: with mu = 3 the first update is on-policy (no
// extra forward, nothing clipped) and the later ones take their ratios
// against the first update's log-probs, clipping once the policy has moved
// far enough; the learning rate follows the warm-up.
func TestUpdateIterations(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	cfg := testConfig()
	cfg.LR, cfg.Iterations, cfg.Epsilon, cfg.WarmupSteps = 5e-2, 3, 0.01, 2
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	exs := examples(t, m)
	sts, err := tr.Update(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 3 {
		t.Fatalf("%d updates, want 3", len(sts))
	}
	if sts[0].Forwards != 0 || sts[0].ClipFrac != 0 {
		t.Errorf("first update: %d extra forwards, clip fraction %g; want 0 and 0 (on-policy)", sts[0].Forwards, sts[0].ClipFrac)
	}
	if sts[1].Forwards != 1 || sts[2].ClipFrac == 0 {
		t.Errorf("later updates: %d extra forwards, last clip fraction %g; want 1 forward and some clipping with a band of 0.01", sts[1].Forwards, sts[2].ClipFrac)
	}
	for i, want := range []float64{2.5e-2, 5e-2, 5e-2} {
		if math.Abs(sts[i].LR-want) > 1e-12 {
			t.Errorf("update %d: lr %g, want %g (warm-up of 2)", i+1, sts[i].LR, want)
		}
	}
	for i := range exs {
		if exs[i].OldLogProbs != nil {
			t.Fatal("Update changed the caller's examples")
		}
	}
	t.Logf("mu = 3: objective %.4f, %.4f, %.4f; clip fraction %.2f, %.2f, %.2f", sts[0].Objective, sts[1].Objective, sts[2].Objective, sts[0].ClipFrac, sts[1].ClipFrac, sts[2].ClipFrac)
}
