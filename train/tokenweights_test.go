package train

import (
	"math"
	"testing"

	"github.com/confclip/confclip/llama"
)

// pgContext opens a training context on m.
func pgContext(t *testing.T, m *llama.Model) *llama.Context {
	t.Helper()
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 256, NUBatch: 256, NSeqMax: 1,
		FlashAttn: llama.FlashAttnOff, TrainingGraphs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// pgSetup opens a training context on the tiny model with a LoRA adapter
// whose B matrices are random (so every LoRA tensor has a gradient) and
// packs the test examples as PGEval sequences.
func pgSetup(t *testing.T) (*llama.Context, []*llama.Param, []llama.PGSeq) {
	t.Helper()
	_, _, ctx, ps, seqs := pgSetupModel(t)
	return ctx, ps, seqs
}

// pgSetupModel is pgSetup, also returning the model and the adapter.
func pgSetupModel(t *testing.T) (*llama.Model, *llama.Adapter, *llama.Context, []*llama.Param, []llama.PGSeq) {
	t.Helper()
	m := load(t, false)
	a := newAdapter(t, m, true)
	ps, _, err := AdapterParams(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx := pgContext(t, m)
	if err := ctx.SetAdapter(a, 1); err != nil {
		t.Fatal(err)
	}
	var seqs []llama.PGSeq
	for _, e := range examples(t, m) {
		seqs = append(seqs, pgSeq(e))
	}
	return m, a, ctx, ps, seqs
}

// pgSeq is an example as a PGEval sequence (weight 0).
func pgSeq(e Example) llama.PGSeq {
	toks := append(append([]llama.Token(nil), e.Prompt...), e.Completion...)
	return llama.PGSeq{Tokens: toks, NPrompt: len(e.Prompt)}
}

// gradBuffers are zeroed gradient buffers for ps.
func gradBuffers(ps []*llama.Param) [][]float32 {
	grads := make([][]float32, len(ps))
	for j, p := range ps {
		grads[j] = make([]float32, p.Len())
	}
	return grads
}

func pgGrads(t *testing.T, ctx *llama.Context, ps []*llama.Param, seqs []llama.PGSeq) (float64, []float32, [][]float32) {
	t.Helper()
	grads := gradBuffers(ps)
	loss, lp, err := ctx.PGEval(seqs, ps, grads)
	if err != nil {
		t.Fatal(err)
	}
	return loss, lp, grads
}

// withTokenWeights gives completion token k of sequence i the weight f(i, k).
func withTokenWeights(seqs []llama.PGSeq, f func(i, k int) float32) []llama.PGSeq {
	return perToken(seqs, f, func(s *llama.PGSeq) *[]float32 { return &s.TokenWeights })
}

// perToken copies seqs with the per-token slice that field picks set to
// f(i, k) for completion token k of sequence i.
func perToken(seqs []llama.PGSeq, f func(i, k int) float32, field func(*llama.PGSeq) *[]float32) []llama.PGSeq {
	out := make([]llama.PGSeq, len(seqs))
	for i, s := range seqs {
		w := make([]float32, len(s.Tokens)-s.NPrompt)
		for k := range w {
			w[k] = f(i, k)
		}
		*field(&s) = w
		out[i] = s
	}
	return out
}

// Equal token weights are the sequence weight: same loss and gradients.
func TestTokenWeightsEqualSequenceWeight(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	w := []float32{1.5, -0.5, 0.25}
	bySeq := make([]llama.PGSeq, len(seqs))
	for i, s := range seqs {
		s.Weight = w[i]
		bySeq[i] = s
	}
	l1, _, g1 := pgGrads(t, ctx, ps, bySeq)
	l2, _, g2 := pgGrads(t, ctx, ps, withTokenWeights(seqs, func(i, _ int) float32 { return w[i] }))
	if math.Abs(l1-l2) > 1e-5*math.Abs(l1) {
		t.Errorf("loss with sequence weights %g, with equal token weights %g", l1, l2)
	}
	worst, norm := 0.0, 0.0
	for j := range g1 {
		for k := range g1[j] {
			worst = math.Max(worst, math.Abs(float64(g1[j][k]-g2[j][k])))
			norm = math.Max(norm, math.Abs(float64(g1[j][k])))
		}
	}
	if norm == 0 || worst > 1e-5*norm {
		t.Errorf("gradients differ by up to %g (largest gradient %g)", worst, norm)
	}
}

// With distinct per-token weights (some zero, some negative) the loss is
// -sum w_t log p_t and its gradient matches central finite differences.
func TestTokenWeightsGradientCheck(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	tw := []float32{0.7, -1.3, 0, 2.1, -0.4, 1.0}
	seqs = withTokenWeights(seqs, func(i, k int) float32 { return tw[(3*i+k)%len(tw)] })
	loss, lp, g := pgGrads(t, ctx, ps, seqs)
	want, n := 0.0, 0
	for _, s := range seqs {
		for _, w := range s.TokenWeights {
			want -= float64(w) * float64(lp[n])
			n++
		}
	}
	if math.Abs(loss-want) > 1e-4*math.Max(1, math.Abs(want)) {
		t.Fatalf("loss %g, want -sum w_t log p_t = %g", loss, want)
	}
	scratch := gradBuffers(ps)
	lossNow := func() float64 {
		l, _, err := ctx.PGEval(seqs, ps, scratch) // the loss is evaluated with a backward pass only
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	worst := fdCheck(t, ps, g, lossNow, nil, 2, 2e-2, 1e-3)
	t.Logf("per-token weights: worst relative error %.3g", worst)
}

func TestTokenWeightsBad(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	grads := gradBuffers(ps)
	short := append([]llama.PGSeq(nil), seqs...)
	short[0].TokenWeights = []float32{1}
	if _, _, err := ctx.PGEval(short, ps, grads); err == nil {
		t.Error("PGEval accepted the wrong number of token weights")
	}
	nan := withTokenWeights(seqs, func(i, k int) float32 { return float32(math.NaN()) })
	if _, _, err := ctx.PGEval(nan, ps, grads); err == nil {
		t.Error("PGEval accepted a NaN token weight")
	}
}

// The log-probs a training evaluation returns are those of the forward pass:
// the backward pass once reused the logits' memory, and every sequence but
// the last came back wrong while the loss was right.
func TestPGEvalLogProbsSurviveBackward(t *testing.T) {
	ctx, ps, seqs := pgSetup(t)
	for i := range seqs {
		seqs[i].Weight = 1
	}
	_, fwd, err := ctx.PGEval(seqs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	loss, bwd, _ := pgGrads(t, ctx, ps, seqs)
	sum := 0.0
	for k := range fwd {
		sum -= float64(fwd[k])
		if math.Abs(float64(fwd[k]-bwd[k])) > 1e-5 {
			t.Errorf("completion token %d: log-prob %g without the backward pass, %g with it", k, fwd[k], bwd[k])
		}
	}
	if math.Abs(loss-sum) > 1e-4*sum {
		t.Errorf("loss %g, want -sum log p = %g", loss, sum)
	}
}

// Gradients of an adapter's tensors on a context where the adapter is not
// set: ggml aborted the process ("no trainable parameters found"); now it
// is an error.
func TestPGEvalParamsOutsideGraph(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	ps, _, err := AdapterParams(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx := pgContext(t, m) // the adapter is not set on it
	seq := pgSeq(examples(t, m)[0])
	seq.Weight = 1
	grads := gradBuffers(ps)
	if _, _, err := ctx.PGEval([]llama.PGSeq{seq}, ps, grads); err == nil {
		t.Fatal("PGEval with parameters outside the graph gave no error")
	} else {
		t.Log(err)
	}
}
