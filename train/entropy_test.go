package train

import (
	"context"
	"math"
	"testing"

	"github.com/confclip/confclip/llama"
)

// withEntropyWeights gives completion token k of sequence i the entropy
// weight f(i, k).
func withEntropyWeights(seqs []llama.PGSeq, f func(i, k int) float32) []llama.PGSeq {
	return perToken(seqs, f, func(s *llama.PGSeq) *[]float32 { return &s.EntropyWeights })
}

// decodeEntropies are the entropies H(p_t) = -sum_v p_v log p_v of every
// completion token's distribution, from logits rows an inference context
// decodes (with the adapter set): not through llama_pg_eval.
func decodeEntropies(t *testing.T, m *llama.Model, a *llama.Adapter, seqs []llama.PGSeq) [][]float64 {
	return decodeRows(t, m, a, seqs, func(row []float32, _ llama.Token) float64 { return rowEntropy(row) })
}

// decodeRows applies f to every completion token and the logits row that
// predicts it, which an inference context decodes (with the adapter set),
// sequences in order.
func decodeRows(t *testing.T, m *llama.Model, a *llama.Adapter, seqs []llama.PGSeq, f func(row []float32, tok llama.Token) float64) [][]float64 {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 256, NUBatch: 256, NSeqMax: 1, FlashAttn: llama.FlashAttnOff})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if err := ctx.SetAdapter(a, 1); err != nil {
		t.Fatal(err)
	}
	b := llama.NewBatch(256, 1)
	defer b.Close()
	out := make([][]float64, len(seqs))
	for i, s := range seqs {
		ctx.ClearKV()
		b.Clear()
		for p, tok := range s.Tokens {
			if _, err := b.Add(tok, p, []int{0}, p >= s.NPrompt-1 && p < len(s.Tokens)-1); err != nil {
				t.Fatal(err)
			}
		}
		if err := ctx.Decode(b); err != nil {
			t.Fatal(err)
		}
		for p := s.NPrompt - 1; p < len(s.Tokens)-1; p++ {
			row, err := ctx.Logits(p)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append(out[i], f(row, s.Tokens[p+1]))
		}
	}
	return out
}

// TestEntropyTermLoss: with entropy weights e_t the loss gains
// -sum_t e_t H(p_t), where H comes from logits an inference context
// decodes, alone (no policy-gradient weight) and beside token weights; a
// sequence with entropy weights only is trained (its gradient is not zero),
// and zero entropy weights change neither the loss nor the gradient.
func TestEntropyTermLoss(t *testing.T) {
	m, a, ctx, ps, seqs := pgSetupModel(t)
	H := decodeEntropies(t, m, a, seqs)
	ew := []float32{0.5, -1.1, 0, 2.0, 0.3}
	ef := func(i, k int) float32 { return ew[(2*i+k)%len(ew)] }
	tw := []float32{0.7, -1.3, 0, 2.1}
	wf := func(i, k int) float32 { return tw[(3*i+k)%len(tw)] }

	entOnly := withEntropyWeights(seqs, ef)
	loss, _, g := pgGrads(t, ctx, ps, entOnly)
	want, meanH, n := 0.0, 0.0, 0
	for i, s := range entOnly {
		for k, e := range s.EntropyWeights {
			want -= float64(e) * H[i][k]
			meanH += H[i][k]
			n++
		}
	}
	t.Logf("entropy only: loss %.9g, -sum e_t H_t from decoded logits %.9g (mean H %.4f nats over %d tokens)", loss, want, meanH/float64(n), n)
	// The two graphs (packed, without a cache; decoding with one) round
	// differently: 4.6e-6 of the loss here.
	if math.Abs(loss-want) > 3e-5*math.Max(1, math.Abs(want)) {
		t.Errorf("entropy only: loss %g, want -sum e_t H_t = %g", loss, want)
	}
	if gradMax(g) == 0 {
		t.Error("entropy weights alone: the gradient is zero")
	}

	both := withEntropyWeights(withTokenWeights(seqs, wf), ef)
	loss, lp, _ := pgGrads(t, ctx, ps, both)
	want, n = 0.0, 0
	for i, s := range both {
		for k := range s.EntropyWeights {
			want -= float64(s.TokenWeights[k])*float64(lp[n]) + float64(s.EntropyWeights[k])*H[i][k]
			n++
		}
	}
	if math.Abs(loss-want) > 3e-5*math.Max(1, math.Abs(want)) {
		t.Errorf("token and entropy weights: loss %g, want -sum w_t log p_t - sum e_t H_t = %g", loss, want)
	}

	plain := withTokenWeights(seqs, wf)
	l0, _, g0 := pgGrads(t, ctx, ps, plain)
	l1, _, g1 := pgGrads(t, ctx, ps, withEntropyWeights(plain, func(int, int) float32 { return 0 }))
	if l0 != l1 || gradMaxDiff(g0, g1) != 0 {
		t.Errorf("zero entropy weights changed the evaluation: loss %g against %g, gradients by up to %g", l1, l0, gradMaxDiff(g0, g1))
	}
}

// TestEntropyTermGradientCheck: the entropy term's gradient, alone and
// beside per-token policy-gradient weights, matches central finite
// differences of the loss.
func TestEntropyTermGradientCheck(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	ew := []float32{0.9, -0.6, 1.7, 0}
	tw := []float32{0.7, -1.3, 0, 2.1, -0.4, 1.0}
	for _, c := range []struct {
		name string
		seqs []llama.PGSeq
	}{
		{"entropy only", withEntropyWeights(seqs, func(i, k int) float32 { return ew[(i+k)%len(ew)] })},
		{"entropy and token weights", withEntropyWeights(withTokenWeights(seqs, func(i, k int) float32 { return tw[(3*i+k)%len(tw)] }),
			func(i, k int) float32 { return 0.5 * ew[(i+2*k)%len(ew)] })},
	} {
		t.Logf("%s: worst relative error %.3g", c.name, pgFDCheck(t, ctx, ps, c.seqs))
	}
}

// pgFDCheck checks PGEval's gradient over seqs against central finite
// differences of its loss and returns the worst relative error.
func pgFDCheck(t *testing.T, ctx *llama.Context, ps []*llama.Param, seqs []llama.PGSeq) float64 {
	t.Helper()
	_, _, g := pgGrads(t, ctx, ps, seqs)
	scratch := gradBuffers(ps)
	lossNow := func() float64 {
		l, _, err := ctx.PGEval(seqs, ps, scratch)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	return fdCheck(t, ps, g, lossNow, nil, 2, 2e-2, 1e-3)
}

// TestEntropyWeightsBad: a wrong count or a weight that is not finite is
// refused by name, before llama.cpp runs.
func TestEntropyWeightsBad(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	grads := gradBuffers(ps)
	bad := withEntropyWeights(seqs, func(int, int) float32 { return 1 })
	bad[1].EntropyWeights = bad[1].EntropyWeights[1:]
	if _, _, err := ctx.PGEval(bad, ps, grads); err == nil {
		t.Error("short entropy weights accepted")
	} else {
		t.Log(err)
	}
	nan := withEntropyWeights(seqs, func(i, k int) float32 { return float32(math.NaN()) })
	if _, _, err := ctx.PGEval(nan, ps, grads); err == nil {
		t.Error("NaN entropy weights accepted")
	} else {
		t.Log(err)
	}
}

// meanEntropy is the mean entropy of the examples' completion-token
// distributions under the adapter's current values.
func meanEntropy(t *testing.T, m *llama.Model, a *llama.Adapter, exs []Example) float64 {
	t.Helper()
	var seqs []llama.PGSeq
	for _, e := range exs {
		seqs = append(seqs, pgSeq(e))
	}
	sum, n := 0.0, 0
	for _, h := range decodeEntropies(t, m, a, seqs) {
		for _, v := range h {
			sum += v
			n++
		}
	}
	return sum / float64(n)
}

// TestEntropyCoefMovesEntropy: on a batch whose advantages are all zero,
// train.entropy_coef alone trains: a positive coefficient raises the mean
// token entropy over a few steps and a negative one lowers it, while
// without the term the batch is skipped and the adapter does not move.
// Over two adapter seeds.
func TestEntropyCoefMovesEntropy(t *testing.T) {
	m := load(t, false)
	for _, seed := range []uint64{7, 11} {
		for _, coef := range []float64{0.05, -0.05, 0} {
			a := loraAdapter(t, m, Config{LoraRank: 4, LoraAlpha: 8, Seed: seed}, true)
			exs := examples(t, m)
			for i := range exs {
				exs[i].Advantage = 0
			}
			h0 := meanEntropy(t, m, a, exs)
			cfg := testConfig()
			cfg.LR = 1e-2
			cfg.EntropyCoef = coef
			tr, err := NewLoRATrainer(m, a, cfg)
			if err != nil {
				t.Fatal(err)
			}
			skipped := 0
			for k := 0; k < 5; k++ {
				st, err := tr.Step(context.Background(), exs)
				if err != nil {
					t.Fatal(err)
				}
				if st.Skipped {
					skipped++
				}
			}
			tr.Close()
			h1 := meanEntropy(t, m, a, exs)
			t.Logf("seed %d, entropy_coef %+g: mean entropy %.4f -> %.4f nats, %d of 5 steps skipped", seed, coef, h0, h1, skipped)
			switch {
			case coef > 0 && !(h1 > h0), coef < 0 && !(h1 < h0):
				t.Errorf("seed %d, entropy_coef %+g: mean entropy %.4f -> %.4f", seed, coef, h0, h1)
			case coef == 0 && (skipped != 5 || h1 != h0):
				t.Errorf("seed %d, no entropy term: %d of 5 steps skipped, entropy %.6f -> %.6f", seed, skipped, h0, h1)
			case coef != 0 && skipped != 0:
				t.Errorf("seed %d, entropy_coef %+g: %d steps skipped", seed, coef, skipped)
			}
		}
	}
}

// gradMax is the largest absolute gradient value.
func gradMax(g [][]float32) float64 {
	worst := 0.0
	for _, row := range g {
		for _, v := range row {
			worst = math.Max(worst, math.Abs(float64(v)))
		}
	}
	return worst
}

// gradMaxDiff is the largest absolute difference between two gradients.
func gradMaxDiff(a, b [][]float32) float64 {
	worst := 0.0
	for j := range a {
		for k := range a[j] {
			worst = math.Max(worst, math.Abs(float64(a[j][k]-b[j][k])))
		}
	}
	return worst
}

// rowEntropy is H(softmax(z)) = -sum_v p_v log p_v of a logits row, as
// log(sum_v e^(z_v - m)) - sum_v e^(z_v - m) (z_v - m) / sum_v e^(z_v - m),
// m the largest logit.
func rowEntropy(row []float32) float64 {
	mx := math.Inf(-1)
	for _, z := range row {
		mx = math.Max(mx, float64(z))
	}
	var sum, s1 float64
	for _, z := range row {
		d := float64(z) - mx
		sum += math.Exp(d)
		s1 += math.Exp(d) * d
	}
	return math.Log(sum) - s1/sum
}

// TestEntropyWorkedExample is METHOD.md's worked example of the entropy
// term: logits (2, 1, 0) give p = (0.6652, 0.2447, 0.0900), H = 0.8324
// nats, and dH/dz = -p (log p + H) = (-0.2826, 0.1408, 0.1418), which
// central differences of H reproduce; with entropy_coef 0.01 and
// token_mean over 4 tokens the token's loss term is -0.01/4 x 0.8324 =
// -0.002081.
func TestEntropyWorkedExample(t *testing.T) {
	z := []float32{2, 1, 0}
	H := rowEntropy(z)
	if math.Abs(H-0.8324) > 5e-5 {
		t.Fatalf("H = %.6f, want 0.8324", H)
	}
	p := []float64{0.6652, 0.2447, 0.0900}
	wantGrad := []float64{-0.2826, 0.1408, 0.1418}
	for k := range z {
		if byHand := -p[k] * (math.Log(p[k]) + H); math.Abs(byHand-wantGrad[k]) > 1e-4 {
			t.Errorf("-p_%d (log p_%d + H) = %.4f, want %.4f", k, k, byHand, wantGrad[k])
		}
		const h = 1e-3
		zp, zm := append([]float32(nil), z...), append([]float32(nil), z...)
		zp[k] += h
		zm[k] -= h
		if fd := (rowEntropy(zp) - rowEntropy(zm)) / (2 * h); math.Abs(fd-wantGrad[k]) > 1e-4 {
			t.Errorf("dH/dz_%d by central differences %.5f, want %.4f", k, fd, wantGrad[k])
		}
	}
	if term := -0.01 / 4 * H; math.Abs(term-(-0.002081)) > 1e-6 {
		t.Errorf("loss term %.6f, want -0.002081", term)
	}
}
