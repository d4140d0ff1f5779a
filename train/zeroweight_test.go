package train

import (
	"context"
	"math"
	"slices"
	"testing"
)

// TestZeroWeightSequencesSkipped: without a KL term, the sequences with a
// zero advantage or every token masked are left out of every pass, and
// the step is the same bit for bit as with them evaluated (a sequence a
// pass, so the packing is the same): gradient, loss, objective, clip
// fraction, and the adapter after two updates (the second takes ratios
// against the first's log-probs). With a KL term nothing is left out.
func TestZeroWeightSequencesSkipped(t *testing.T) {
	m := load(t, false)
	base := examples(t, m)
	var exs []Example
	for i, adv := range []float64{1, 0, 2, 0, -0.5, 0, 1, 1} {
		e := base[i%len(base)]
		e.Advantage = adv
		switch i {
		case 6:
			e.Masked = true
		case 7:
			e.Mask = make([]bool, len(e.Completion)) // every token out
		}
		exs = append(exs, e)
	}
	const zero = 5 // advantages 0 (three), masked, every token masked
	trainer := func(keep bool, iterations int, beta float64) *Trainer {
		cfg := testConfig()
		cfg.MicroBatch = 1 // a sequence a pass
		cfg.Iterations, cfg.Beta, cfg.keepZeroWeight = iterations, beta, keep
		tr, err := NewLoRATrainer(m, newAdapter(t, m, true), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		return tr
	}

	plain, skip := trainer(true, 1, 0), trainer(false, 1, 0)
	sp, err := plain.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := skip.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	if sp.ZeroWeight != 0 || ss.ZeroWeight != zero || sp.MicroBatches != len(exs) || ss.MicroBatches != len(exs)-zero {
		t.Errorf("left out %d and %d sequences in %d and %d passes; want 0 and %d in %d and %d",
			sp.ZeroWeight, ss.ZeroWeight, sp.MicroBatches, ss.MicroBatches, zero, len(exs), len(exs)-zero)
	}
	if sp.Loss != ss.Loss || sp.Objective != ss.Objective || sp.GradNorm != ss.GradNorm {
		t.Errorf("loss %g / %g, objective %g / %g, gradient norm %g / %g (evaluated / left out)",
			sp.Loss, ss.Loss, sp.Objective, ss.Objective, sp.GradNorm, ss.GradNorm)
	}
	for j, g := range plain.grads {
		if !slices.Equal(g, skip.grads[j]) {
			t.Fatalf("%s: the gradients differ", plain.params[j].Name)
		}
	}
	for i, e := range exs {
		left := e.Advantage == 0 || e.Masked || e.kept() == 0
		switch {
		case left && ss.LogProbs[i] != nil:
			t.Errorf("sequence %d was left out but has log-probs", i)
		case !left && !slices.Equal(ss.LogProbs[i], sp.LogProbs[i]):
			t.Errorf("sequence %d: log-probs %v, evaluated with the others %v", i, ss.LogProbs[i], sp.LogProbs[i])
		}
	}

	// Two updates, the second's ratios against the first's log-probs.
	plain, skip = trainer(true, 2, 0), trainer(false, 2, 0)
	up, err := plain.Update(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	us, err := skip.Update(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	if len(up) != 2 || len(us) != 2 || up[1].ClipFrac != us[1].ClipFrac || up[1].Objective != us[1].Objective {
		t.Fatalf("second updates: %+v and %+v", up, us)
	}
	for j := range plain.values {
		if !slices.Equal(plain.values[j], skip.values[j]) {
			t.Fatalf("%s differs after two updates", plain.params[j].Name)
		}
	}

	// With a KL term every sequence is pulled towards the reference.
	kl, err := trainer(false, 1, 0.1).Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	if kl.ZeroWeight != 0 || math.IsNaN(kl.KL) {
		t.Errorf("with a KL term %d sequences were left out (KL %g)", kl.ZeroWeight, kl.KL)
	}
}
