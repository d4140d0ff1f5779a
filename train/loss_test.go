package train

import (
	"math"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestTokenLossWorkedExample5 is METHOD.md's worked example 5: one token,
// old -1.0, new -0.5, eps_low 0.2, eps_high 0.28, ref -1.2, beta 0.04.
func TestTokenLossWorkedExample5(t *testing.T) {
	pos := Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: 0}.TokenLoss(+1, TokenLogProbs{Cur: -0.5, Old: -1.0, Ref: 0})
	if !near(pos.Ratio, 1.648721, 1e-5) || !near(-pos.Loss, 1.28, 1e-5) || !pos.Clipped || pos.Grad != 0 {
		t.Errorf("A = +1: rho %.6f, J %.6f, clipped %v, grad %g; want rho 1.648721, J 1.28, clipped, no gradient", pos.Ratio, -pos.Loss, pos.Clipped, pos.Grad)
	}
	neg := Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: 0}.TokenLoss(-1, TokenLogProbs{Cur: -0.5, Old: -1.0, Ref: 0})
	if !near(-neg.Loss, -1.648721, 1e-5) || neg.Clipped {
		t.Errorf("A = -1: J %.6f, clipped %v; want J -1.648721, not clipped", -neg.Loss, neg.Clipped)
	}
	kl := Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: 0.04}.TokenLoss(-1, TokenLogProbs{Cur: -0.5, Old: -1.0, Ref: -1.2})
	if !near(kl.KL, 0.196585, 1e-5) || !near(kl.Loss, 1.656585, 1e-5) {
		t.Errorf("A = -1, beta 0.04: KL %.6f, loss %.6f; want 0.196585 and 1.656585", kl.KL, kl.Loss)
	}
}

// TestTokenLossGradient checks Grad against a central finite difference of
// Loss in the current log-probability, on both sides of the band, for both
// signs of the advantage, with and without the KL term (away from the
// band's edges, where the min has a kink).
func TestTokenLossGradient(t *testing.T) {
	const h = 1e-6
	for _, a := range []float64{1, -1, 0.37, -2.5, 0} {
		for _, cur := range []float64{-3, -1.6, -1.05, -1, -0.9, -0.5, -0.01} {
			for _, beta := range []float64{0, 0.04, 0.5} {
				old, ref := -1.0, -1.3
				f := func(x float64) float64 {
					return Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: beta}.TokenLoss(a, TokenLogProbs{Cur: x, Old: old, Ref: ref}).Loss
				}
				fd := (f(cur+h) - f(cur-h)) / (2 * h)
				got := Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: beta}.TokenLoss(a, TokenLogProbs{Cur: cur, Old: old, Ref: ref}).Grad
				if !near(fd, got, 1e-6*max(1, math.Abs(fd))) {
					t.Errorf("a %g, cur %g, beta %g: Grad %.9g, finite difference %.9g", a, cur, beta, got, fd)
				}
			}
		}
	}
	// At rho = 1 without KL the gradient is the plain policy gradient -A.
	if g := (Objective{EpsLow: 0.2, EpsHigh: 0.2, Beta: 0}).TokenLoss(0.7, TokenLogProbs{Cur: -2, Old: -2, Ref: 0}).Grad; !near(g, -0.7, 1e-12) {
		t.Errorf("on-policy gradient %g, want -0.7", g)
	}
}

// TestBatchLossGradient checks the batch's weights against a finite
// difference of the batch loss in each token's log-probability: the
// training evaluation minimises -sum w_t log p_t, so w_t must be
// -dL/d(log p_t).
func TestBatchLossGradient(t *testing.T) {
	adv := []float64{1.2, -0.4, 0.9, -1.7}
	cur := [][]float32{{-0.5, -1.1, -2}, {-0.3}, {-1.4, -0.2}, {-0.8, -0.9, -1.0, -0.1}}
	old := [][]float32{{-0.7, -1.0, -2.4}, {-0.6}, {-1.4, -0.25}, {-0.8, -1.5, -0.6, -0.15}}
	ref := [][]float32{{-0.6, -1.3, -1.9}, {-0.4}, {-1.0, -0.3}, {-0.9, -1.0, -0.7, -0.2}}
	lens := []int{3, 1, 2, 4}
	masked := []bool{false, false, true, false}
	for _, agg := range []Aggregation{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		z, err := SeqNorms(agg, lens, masked, 8)
		if err != nil {
			t.Fatal(err)
		}
		obj := Objective{EpsLow: 0.2, EpsHigh: 0.28, Beta: 0.1}
		b, err := obj.Loss(adv, cur, old, ref, z, nil)
		if err != nil {
			t.Fatal(err)
		}
		const h = 1e-3 // float32 log-probs
		for i := range cur {
			for k := range cur[i] {
				at := func(d float32) float64 {
					c := make([][]float32, len(cur))
					for j := range cur {
						c[j] = append([]float32(nil), cur[j]...)
					}
					c[i][k] += d
					bl, _ := obj.Loss(adv, c, old, ref, z, nil)
					return bl.Loss
				}
				fd := (at(h) - at(-h)) / (2 * h)
				if w := float64(b.Weights[i][k]); !near(-fd, w, 1e-4) {
					t.Errorf("%s: completion %d token %d: weight %.6g, -dL/dlogp %.6g", agg, i, k, w, -fd)
				}
			}
		}
		if b.Tokens != 8 {
			t.Errorf("%s: %d tokens counted, want 8 (the masked completion's 2 left out)", agg, b.Tokens)
		}
	}
}

// TestBatchLossOnPolicy: with old = nil (the first update on fresh
// rollouts) and beta = 0 every weight is A_i * z_i, the loss of METHOD.md's
// "Loss for the training step".
func TestBatchLossOnPolicy(t *testing.T) {
	adv := []float64{0.5, -1.5}
	cur := [][]float32{{-1, -2}, {-0.5, -0.5, -3}}
	z, _ := SeqNorms(AggTokenMean, []int{2, 3}, nil, 0)
	b, err := Objective{EpsLow: 0.2, EpsHigh: 0.2}.Loss(adv, cur, nil, nil, z, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cur {
		for k := range cur[i] {
			if want := adv[i] / 5; !near(float64(b.Weights[i][k]), want, 1e-7) {
				t.Errorf("completion %d token %d: weight %g, want A/Z = %g", i, k, b.Weights[i][k], want)
			}
		}
	}
	if b.ClipFrac != 0 || b.MeanKL != 0 {
		t.Errorf("on-policy: clip fraction %g, KL %g; want 0 and 0", b.ClipFrac, b.MeanKL)
	}
	if _, err := (Objective{Beta: 0.1}).Loss(adv, cur, nil, nil, z, nil); err == nil {
		t.Error("beta > 0 without reference log-probs accepted")
	}
}

// TestSeqNorms: the denominators of the three aggregations, and a masked
// completion leaving them (it counts in neither the tokens nor G).
func TestSeqNorms(t *testing.T) {
	lens := []int{4, 2, 6}
	for _, tc := range []struct {
		agg    string
		masked []bool
		want   []float64
	}{
		{TokenMean, nil, []float64{1.0 / 12, 1.0 / 12, 1.0 / 12}},
		{TokenMean, []bool{false, true, false}, []float64{1.0 / 10, 0, 1.0 / 10}},
		{"dapo", []bool{false, true, false}, []float64{1.0 / 10, 0, 1.0 / 10}},
		{SeqMeanTokenMean, nil, []float64{1.0 / 12, 1.0 / 6, 1.0 / 18}},
		{"grpo", []bool{true, false, false}, []float64{0, 1.0 / 4, 1.0 / 12}},
		{SeqMeanTokenSumNorm, nil, []float64{1.0 / 24, 1.0 / 24, 1.0 / 24}},
		{"dr_grpo", []bool{false, false, true}, []float64{1.0 / 16, 1.0 / 16, 0}},
	} {
		agg, err := ParseAggregation(tc.agg)
		if err != nil {
			t.Fatal(err)
		}
		z, err := SeqNorms(agg, lens, tc.masked, 8)
		if err != nil {
			t.Fatal(err)
		}
		for i := range z {
			if !near(z[i], tc.want[i], 1e-12) {
				t.Errorf("%s masked %v: z = %v, want %v", tc.agg, tc.masked, z, tc.want)
				break
			}
		}
	}
	if _, err := ParseAggregation("mean"); err == nil {
		t.Error("unknown aggregation accepted")
	}
	if _, err := SeqNorms(Aggregation(7), lens, nil, 8); err == nil {
		t.Error("out-of-range aggregation accepted")
	}
	if _, err := SeqNorms(AggSeqMeanTokenSumNorm, lens, nil, 0); err == nil {
		t.Error("seq_mean_token_sum_norm without max tokens accepted")
	}
	if agg, _ := LossAgg("bnpo"); agg != TokenMean {
		t.Errorf("bnpo = %s, want token_mean", agg)
	}
}

func TestScheduledLR(t *testing.T) {
	lr := func(s string, k, warm, total int) float64 {
		v, err := ScheduledLR(s, 1, k, warm, total)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		s              string
		k, warm, total int
		want           float64
	}{
		{Constant, 1, 0, 10, 1}, {Constant, 10, 0, 10, 1},
		{Constant, 1, 4, 10, 0.25}, {Constant, 4, 4, 10, 1}, {Constant, 5, 4, 10, 1},
		{Linear, 1, 0, 4, 1}, {Linear, 2, 0, 4, 0.75}, {Linear, 4, 0, 4, 0.25},
		{Linear, 2, 2, 6, 1}, {Linear, 3, 2, 6, 1}, {Linear, 5, 2, 6, 0.5},
		{Cosine, 1, 0, 5, 1}, {Cosine, 3, 0, 4, 0.5}, {Cosine, 1, 1, 3, 1}, {Cosine, 3, 1, 3, 0.5},
		{Linear, 7, 0, 0, 1}, // no total: constant after the warm-up
	} {
		if got := lr(tc.s, tc.k, tc.warm, tc.total); !near(got, tc.want, 1e-12) {
			t.Errorf("%s update %d, warm-up %d, total %d: %g, want %g", tc.s, tc.k, tc.warm, tc.total, got, tc.want)
		}
	}
	if _, err := ScheduledLR("step", 1, 1, 0, 10); err == nil {
		t.Error("unknown schedule accepted")
	}
}

// TestParseAggregation: every name and TRL loss type reads as its
// aggregation, String gives the name back, and an unknown name is refused
// with the known ones.
func TestParseAggregation(t *testing.T) {
	for name, want := range map[string]Aggregation{
		TokenMean: AggTokenMean, SeqMeanTokenMean: AggSeqMeanTokenMean, SeqMeanTokenSumNorm: AggSeqMeanTokenSumNorm,
		"grpo": AggSeqMeanTokenMean, "bnpo": AggTokenMean, "dr_grpo": AggSeqMeanTokenSumNorm, "dapo": AggTokenMean,
	} {
		got, err := ParseAggregation(name)
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", name, got, err, want)
		}
	}
	for _, a := range []Aggregation{AggTokenMean, AggSeqMeanTokenMean, AggSeqMeanTokenSumNorm} {
		if back, err := ParseAggregation(a.String()); err != nil || back != a {
			t.Errorf("%v does not read back: %v, %v", a, back, err)
		}
	}
	if _, err := ParseAggregation("tokenmean"); err == nil || !strings.Contains(err.Error(), TokenMean) {
		t.Errorf("unknown name: %v", err)
	}
}
