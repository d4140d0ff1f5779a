package train

import (
	"math"
	"testing"

	"github.com/confclip/confclip/llama"
)

// atTemperature sets every sequence's temperature.
func atTemperature(seqs []llama.PGSeq, temp float32) []llama.PGSeq {
	out := make([]llama.PGSeq, len(seqs))
	for i, s := range seqs {
		s.Temperature = temp
		out[i] = s
	}
	return out
}

// scaled is a logits row divided by temp.
func scaled(row []float32, temp float64) []float32 {
	out := make([]float32, len(row))
	for v, z := range row {
		out[v] = float32(float64(z) / temp)
	}
	return out
}

// TestTemperatureLogProbs (patch 0058): at temperature T llama_pg_eval's
// log-probs are log softmax(z / T) of the logits an inference context
// decodes, its loss -sum w_t log p_t from them, and an entropy weight
// prices H(softmax(z / T)); T = 1 is bit for bit T = 0 (unset), and T =
// 0.5 differs from both.
func TestTemperatureLogProbs(t *testing.T) {
	m, a, ctx, ps, seqs := pgSetupModel(t)
	const temp = 0.5
	tw := []float32{0.7, -1.3, 0, 2.1}
	weighted := withTokenWeights(seqs, func(i, k int) float32 { return tw[(3*i+k)%len(tw)] })

	// The packed graph without a cache and the decoding one round apart;
	// at T = 1 by up to spread1, and at T the differences scale by 1/T.
	_, lp1, _ := pgGrads(t, ctx, ps, weighted)
	logp1 := decodeRows(t, m, a, seqs, func(row []float32, tok llama.Token) float64 { return rowLogProb(row, tok) })
	spread1 := 0.0
	k := 0
	for i := range weighted {
		for _, w := range logp1[i] {
			spread1 = math.Max(spread1, math.Abs(float64(lp1[k])-w))
			k++
		}
	}
	loss, lp, g := pgGrads(t, ctx, ps, atTemperature(weighted, temp))
	logp := decodeRows(t, m, a, seqs, func(row []float32, tok llama.Token) float64 { return rowLogProb(scaled(row, temp), tok) })
	k, want, spread := 0, 0.0, 0.0
	bound := 1.5*spread1/temp + 1e-5
	for i, s := range weighted {
		for j, w := range logp[i] {
			d := math.Abs(float64(lp[k]) - w)
			spread = math.Max(spread, d)
			if d > bound {
				t.Errorf("sequence %d, token %d: log-prob %g at T = %g, log softmax(z/T) of the decoded logits %g (bound %.3g)", i, j, lp[k], temp, w, bound)
			}
			want -= float64(s.TokenWeights[j]) * w
			k++
		}
	}
	t.Logf("log-probs against the decoded logits' log softmax: within %.3g at T = 1, %.3g at T = %g", spread1, spread, temp)
	if math.Abs(loss-want) > 3e-5*math.Max(1, math.Abs(want)) {
		t.Errorf("loss %g at T = %g, want -sum w_t log p_t = %g", loss, temp, want)
	}

	// the entropy term at T
	H := decodeRows(t, m, a, seqs, func(row []float32, _ llama.Token) float64 { return rowEntropy(scaled(row, temp)) })
	entOnly := atTemperature(withEntropyWeights(seqs, func(i, k int) float32 { return 0.5 + 0.25*float32((i+k)%3) }), temp)
	le, _, _ := pgGrads(t, ctx, ps, entOnly)
	wantE := 0.0
	for i, s := range entOnly {
		for j, e := range s.EntropyWeights {
			wantE -= float64(e) * H[i][j]
		}
	}
	if math.Abs(le-wantE) > 3e-5*math.Max(1, math.Abs(wantE)) {
		t.Errorf("entropy term at T = %g: loss %g, want -sum e_t H(softmax(z/T)) = %g", temp, le, wantE)
	}

	l0, lp0, g0 := pgGrads(t, ctx, ps, weighted)
	l1, lp1, g1 := pgGrads(t, ctx, ps, atTemperature(weighted, 1))
	if l0 != l1 || gradMaxDiff(g0, g1) != 0 {
		t.Errorf("T = 1 is not T unset: loss %g against %g, gradients by up to %g", l1, l0, gradMaxDiff(g0, g1))
	}
	for i := range lp0 {
		if lp0[i] != lp1[i] {
			t.Fatalf("T = 1 is not T unset: log-prob %d %g against %g", i, lp1[i], lp0[i])
		}
	}
	if l0 == loss || gradMaxDiff(g0, g) == 0 {
		t.Errorf("T = %g changed nothing: loss %g, gradients by up to %g", temp, loss, gradMaxDiff(g0, g))
	}
	t.Logf("loss %.6g at T = 1, %.6g at T = %g; entropy term %.6g", l0, loss, temp, le)
}

// rowLogProb is log softmax(row)[tok], in double precision.
func rowLogProb(row []float32, tok llama.Token) float64 {
	mx := math.Inf(-1)
	for _, z := range row {
		mx = math.Max(mx, float64(z))
	}
	sum := 0.0
	for _, z := range row {
		sum += math.Exp(float64(z) - mx)
	}
	return float64(row[tok]) - mx - math.Log(sum)
}

// TestTemperatureGradientCheck (patch 0058): the gradient at T = 0.5, of
// per-token policy-gradient weights alone and with the entropy term,
// matches central finite differences of the loss.
func TestTemperatureGradientCheck(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	tw := []float32{0.7, -1.3, 0, 2.1, -0.4, 1.0}
	ew := []float32{0.9, -0.6, 1.7, 0}
	weighted := withTokenWeights(seqs, func(i, k int) float32 { return tw[(3*i+k)%len(tw)] })
	for _, c := range []struct {
		name string
		seqs []llama.PGSeq
	}{
		{"token weights", atTemperature(weighted, 0.5)},
		{"token and entropy weights", atTemperature(withEntropyWeights(weighted, func(i, k int) float32 { return 0.5 * ew[(i+2*k)%len(ew)] }), 0.5)},
	} {
		t.Logf("%s at T = 0.5: worst relative error %.3g", c.name, pgFDCheck(t, ctx, ps, c.seqs))
	}
}

// TestTemperatureBad: a negative or non-finite temperature is refused by
// PGEval before llama.cpp runs, and by the trainer's settings.
func TestTemperatureBad(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	grads := gradBuffers(ps)
	for _, temp := range []float32{-0.5, float32(math.NaN()), float32(math.Inf(1))} {
		if _, _, err := ctx.PGEval(atTemperature(seqs, temp), ps, grads); err == nil {
			t.Errorf("temperature %g accepted", temp)
		} else {
			t.Log(err)
		}
	}
	m := load(t, false)
	cfg := testConfig()
	cfg.Temperature = -1
	if _, err := NewLoRATrainer(m, newAdapter(t, m, true), cfg); err == nil {
		t.Error("a trainer at temperature -1 was made")
	} else {
		t.Log(err)
	}
}
