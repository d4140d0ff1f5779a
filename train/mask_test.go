package train

import (
	"context"
	"math"
	"testing"
)

// TestPartialMaskEqualsTruncation: a completion whose mask leaves out its
// last tokens trains exactly as the completion cut before them (a token
// conditions only the ones after it, and the mask takes it out of the loss
// and of the token counts): the same loss, objective and gradient, for each
// loss aggregation, with and without old log-probs (the clipped objective's
// per-token path). A mask of the wrong length is an error.
//
// The two batches have different shapes, so their log-probs of the same
// tokens agree only to float noise (measured on AMD EPYC Zen 4: 9.5e-7 to
// 1.4e-6 apart on the AVX-512 build, bit-identical on the AVX2 build): the
// clip decisions are the same only because every ratio is far from the
// band's edges [0.8, 1.2] (1, 0.67 and 1.49). With the former zero-width
// default band the ratios of exactly 1 were clipped or not by that noise.
func TestPartialMaskEqualsTruncation(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	base := randomExamples(m, 3, 9)
	const keep = 40
	for _, agg := range []string{TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm} {
		for _, withOld := range []bool{false, true} {
			cfg := testConfig()
			cfg.LossAgg, cfg.MaxTokens = agg, 48
			tr, err := NewLoRATrainer(m, a, cfg)
			if err != nil {
				t.Fatal(err)
			}
			masked := append([]Example(nil), base...)
			cut := append([]Example(nil), base...)
			masked[1].Mask = make([]bool, len(base[1].Completion))
			for k := range keep {
				masked[1].Mask[k] = true
			}
			cut[1].Completion = base[1].Completion[:keep]
			if withOld {
				lp, err := tr.LogProbs(base)
				if err != nil {
					t.Fatal(err)
				}
				for i := range base {
					old := make([]float32, len(lp[i]))
					for k, v := range lp[i] {
						// ratios 1 (inside the band), 1/e^0.4 and e^0.4
						// (outside it): each 0.2 or more from an edge
						old[k] = v + []float32{0, 0.4, -0.4}[k%3]
					}
					masked[i].OldLogProbs, cut[i].OldLogProbs = old, old
				}
				cut[1].OldLogProbs = cut[1].OldLogProbs[:keep]
			}
			st1, err := tr.Gradient(context.Background(), masked)
			if err != nil {
				t.Fatal(err)
			}
			g1 := snapshotGrads(tr)
			st2, err := tr.Gradient(context.Background(), cut)
			if err != nil {
				t.Fatal(err)
			}
			g2 := snapshotGrads(tr)
			tr.Close()
			if math.Abs(st1.Loss-st2.Loss) > 1e-6*math.Max(1, math.Abs(st2.Loss)) || math.Abs(st1.Objective-st2.Objective) > 1e-6*math.Max(1, math.Abs(st2.Objective)) {
				t.Errorf("%s, old log-probs %v: loss %g / objective %g masked, %g / %g cut", agg, withOld, st1.Loss, st1.Objective, st2.Loss, st2.Objective)
			}
			if st1.ClipFrac != st2.ClipFrac {
				t.Errorf("%s, old log-probs %v: clip fraction %g masked, %g cut", agg, withOld, st1.ClipFrac, st2.ClipFrac)
			}
			if withOld && (st2.ClipFrac == 0 || st2.ClipFrac == 1) {
				t.Errorf("%s: clip fraction %g: want some tokens clipped and some not", agg, st2.ClipFrac)
			}
			if e := relErr(g1, g2); e > 1e-5 || math.IsNaN(e) {
				t.Errorf("%s, old log-probs %v: gradients differ, relative error %g", agg, withOld, e)
			}
		}
	}
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	bad := append([]Example(nil), base...)
	bad[0].Mask = []bool{true}
	if _, err := tr.Gradient(context.Background(), bad); err == nil {
		t.Error("a mask of 1 entry for 48 tokens: no error")
	}
}
