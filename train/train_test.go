package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

var tinyPath string

func TestMain(m *testing.M) {
	if p := os.Getenv("CONFCLIP_TRAIN_HELPER"); p != "" {
		os.Exit(helperProcess(p))
	}
	testutil.Main(m, &tinyPath)
}

func load(t testing.TB, noMmap bool) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{NoMmap: noMmap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// newAdapter writes a fresh adapter and loads it; with randomB the B
// matrices are filled too, so that A's gradients are not zero.
func newAdapter(t testing.TB, m *llama.Model, randomB bool) *llama.Adapter {
	t.Helper()
	return loraAdapter(t, m, Config{LoraRank: 4, LoraAlpha: 8, Seed: 7}, randomB)
}

// loraAdapter is newAdapter with the adapter's settings given.
func loraAdapter(t testing.TB, m *llama.Model, cfg Config, randomB bool) *llama.Adapter {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lora.gguf")
	if err := CreateLoRA(m, path, cfg); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(m, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if randomB {
		randomizeB(t, a, rand.New(rand.NewPCG(3, 4)), 0.3)
	}
	return a
}

// randomizeB draws every B of the adapter from N(0, sigma²), so that it
// changes the model.
func randomizeB(t testing.TB, a *llama.Adapter, rng *rand.Rand, sigma float64) {
	t.Helper()
	ps, _, err := AdapterParams(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if strings.HasSuffix(p.Name, ".lora_b") {
			v := make([]float32, p.Len())
			for i := range v {
				v[i] = float32(rng.NormFloat64() * sigma)
			}
			p.Set(v)
		}
	}
}

// loraGradient is the gradient of examples(m) for newAdapter(m, true) (the
// same seeded adapter on every model of the same shapes), flattened.
func loraGradient(t testing.TB, m *llama.Model) []float64 {
	g, _ := trainerGradient(t, m, testConfig())
	return g
}

// trainerGradient is the gradient of the test examples over m of a new
// trainer with cfg (a seeded adapter, B filled), and the bytes of Q8_0
// copies its context made (train.quantized_backward).
func trainerGradient(t testing.TB, m *llama.Model, cfg Config) ([]float64, int64) {
	t.Helper()
	a := newAdapter(t, m, true)
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Gradient(context.Background(), examples(t, m)); err != nil {
		t.Fatal(err)
	}
	var g []float64
	for _, p := range tr.Grads() {
		for _, v := range p {
			g = append(g, float64(v))
		}
	}
	return g, tr.ctx.QuantizedBackwardBytes()
}

func examples(t testing.TB, m *llama.Model) []Example {
	t.Helper()
	return tokenizedExamples(t, m, [][2]string{{"12+7=", "19"}, {"What is 3*4?", " 12 yes"}, {"a", "bcd"}})
}

// tokenizedExamples are (prompt, completion) pairs tokenized by the model,
// with advantages 1, -0.5 and 2.
func tokenizedExamples(t testing.TB, m *llama.Model, pairs [][2]string) []Example {
	t.Helper()
	var exs []Example
	for i, pc := range pairs {
		p, err := m.Tokenize(pc[0], true, false)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Tokenize(pc[1], false, false)
		if err != nil {
			t.Fatal(err)
		}
		exs = append(exs, Example{Prompt: p, Completion: c, Advantage: []float64{1, -0.5, 2}[i]})
	}
	return exs
}

func testConfig() Config {
	c := DefaultConfig()
	c.LR = 1e-2
	c.GradClip = 0
	c.MicroBatch = 256
	return c
}

// decodeLogProbs computes the completion's log-probs the inference way:
// llama_decode with the KV cache, then the sampler's log-softmax.
func decodeLogProbs(t testing.TB, m *llama.Model, a *llama.Adapter, e Example) []float64 {
	return decodeLogProbsKV(t, m, a, e, llama.KVF32, llama.FlashAttnOff)
}

func decodeLogProbsKV(t testing.TB, m *llama.Model, a *llama.Adapter, e Example, kv llama.KVType, fa llama.FlashAttn) []float64 {
	t.Helper()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, TypeK: kv, TypeV: kv, FlashAttn: fa})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a != nil {
		if err := c.SetAdapter(a, 1); err != nil {
			t.Fatal(err)
		}
	}
	toks := append(append([]llama.Token{}, e.Prompt...), e.Completion...)
	b := llama.NewBatch(len(toks), 1)
	defer b.Close()
	for i, tok := range toks {
		b.Add(tok, i, []int{0}, true)
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	var lp []float64
	for i := len(e.Prompt) - 1; i < len(toks)-1; i++ {
		l, _ := c.Logits(i)
		v, _, err := sampler.LogSoftmaxAt(l, toks[i+1])
		if err != nil {
			t.Fatal(err)
		}
		lp = append(lp, v)
	}
	return lp
}

func TestTrainingForwardMatchesDecode(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	exs := examples(t, m)
	got, err := tr.LogProbs(exs)
	if err != nil {
		t.Fatal(err)
	}
	worst, worstF16 := 0.0, 0.0
	for i, e := range exs {
		want := decodeLogProbs(t, m, a, e)
		wantF16 := decodeLogProbsKV(t, m, a, e, llama.KVF16, llama.FlashAttnAuto)
		for k := range want {
			worst = math.Max(worst, math.Abs(float64(got[i][k])-want[k]))
			worstF16 = math.Max(worstF16, math.Abs(float64(got[i][k])-wantF16[k]))
		}
	}
	t.Logf("max |training forward - decode| log-prob difference (LoRA, 3 packed sequences): %.3g with an F32 KV cache and no flash attention, %.3g with llama.cpp's defaults (F16 cache, flash attention auto)", worst, worstF16)
	if worst > 1e-4 {
		t.Fatalf("training forward log-probs differ from decode by %g", worst)
	}
	// The loss is minus the weighted sum of completion log-probs only: the
	// prompt tokens contribute nothing.
	st, err := tr.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	w := tr.weights(exs)
	want := 0.0
	for i := range exs {
		for _, v := range got[i] {
			want -= w[i] * float64(v)
		}
	}
	if math.Abs(st.Loss-want) > 1e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("loss %g, want -sum w_i sum_t log p = %g", st.Loss, want)
	}
}

// lossAt evaluates the loss with one parameter entry set to v.
// fdCheck compares the analytic gradients grads (one slice per parameter)
// with central finite differences of loss on the perTensor entries with the
// largest gradients of every parameter j that keep accepts (nil: all). It
// fails the test on a relative error over tol and returns the worst one.
func fdCheck(t *testing.T, ps []*llama.Param, grads [][]float32, loss func() float64, keep func(j int) bool, perTensor int, h float32, tol float64) float64 {
	t.Helper()
	worst := 0.0
	checked := 0
	for j, p := range ps {
		if keep != nil && !keep(j) {
			continue
		}
		g := grads[j]
		idx := make([]int, len(g))
		for k := range idx {
			idx[k] = k
		}
		sort.Slice(idx, func(a, b int) bool { return math.Abs(float64(g[idx[a]])) > math.Abs(float64(g[idx[b]])) })
		vals := make([]float32, p.Len())
		p.Get(vals)
		at := func(k int, v float32) float64 {
			old := vals[k]
			vals[k] = v
			p.Set(vals)
			l := loss()
			vals[k] = old
			p.Set(vals)
			return l
		}
		for _, k := range idx[:min(perTensor, len(idx))] {
			if math.Abs(float64(g[k])) < 1e-5 {
				// Below what a finite difference of a float32 loss resolves
				// at these steps (its noise is about 1e-5): gemma4's last
				// layer_output_scale feeds the scale-invariant output norm,
				// so its gradient is only eps's, about 1e-6.
				continue
			}
			// A five-point stencil: the loss is computed in float32, so a
			// step large enough to stay above its rounding noise needs the
			// O(h^4) truncation error of this formula.
			fd := (-at(k, vals[k]+2*h) + 8*at(k, vals[k]+h) - 8*at(k, vals[k]-h) + at(k, vals[k]-2*h)) / (12 * float64(h))
			rel := math.Abs(fd-float64(g[k])) / math.Max(math.Abs(fd), math.Abs(float64(g[k])))
			worst = math.Max(worst, rel)
			checked++
			if rel > tol {
				t.Errorf("%s[%d]: analytic %g, finite difference %g (relative error %.2g)", p.Name, k, g[k], fd, rel)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no gradient entries checked")
	}
	return worst
}

// gradCheck checks a trainer's loss gradients (fdCheck, tolerance 1e-3).
func gradCheck(t *testing.T, tr *Trainer, exs []Example, perTensor int, h float32) float64 {
	if _, err := tr.Gradient(context.Background(), exs); err != nil {
		t.Fatal(err)
	}
	analytic := make([][]float32, len(tr.grads))
	for j, g := range tr.grads {
		analytic[j] = append([]float32(nil), g...)
	}
	loss := func() float64 {
		st, err := tr.Gradient(context.Background(), exs)
		if err != nil {
			t.Fatal(err)
		}
		return st.Loss
	}
	worst := fdCheck(t, tr.params, analytic, loss, nil, perTensor, h, 1e-3)
	t.Logf("gradient check: worst relative error %.3g", worst)
	return worst
}

func TestLoRAGradientCheck(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	gradCheck(t, tr, examples(t, m), 2, 2e-2)
}

func TestFullGradientCheck(t *testing.T) {
	m := load(t, true)
	names, err := F32Weights(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewFullTrainer(m, names, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	gradCheck(t, tr, examples(t, m), 1, 2e-2)
}

func meanLogProb(t *testing.T, tr *Trainer, e Example) float64 {
	lp, err := tr.LogProbs([]Example{e})
	if err != nil {
		t.Fatal(err)
	}
	s := 0.0
	for _, v := range lp[0] {
		s += float64(v)
	}
	return s / float64(len(lp[0]))
}

func TestStepDirection(t *testing.T) {
	m := load(t, false)
	for _, tc := range []struct {
		adv  float64
		want string
	}{{1, "up"}, {-1, "down"}, {0, "same"}} {
		t.Run(fmt.Sprint(tc.adv), func(t *testing.T) {
			a := newAdapter(t, m, false) // a new adapter: B = 0
			tr, err := NewLoRATrainer(m, a, testConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			e := examples(t, m)[0]
			e.Advantage = tc.adv
			before := meanLogProb(t, tr, e)
			vals0 := snapshot(tr)
			// B starts at zero, so the first step moves only B; a second
			// step moves A too.
			for i := 0; i < 2; i++ {
				if _, err := tr.Step(context.Background(), []Example{e}); err != nil {
					t.Fatal(err)
				}
			}
			after := meanLogProb(t, tr, e)
			t.Logf("advantage %+g: mean log-prob %.5f -> %.5f", tc.adv, before, after)
			switch tc.want {
			case "up":
				if after <= before {
					t.Fatalf("a positive advantage must raise the log-prob: %g -> %g", before, after)
				}
			case "down":
				if after >= before {
					t.Fatalf("a negative advantage must lower the log-prob: %g -> %g", before, after)
				}
			case "same":
				for j, v := range snapshot(tr) {
					for k := range v {
						if v[k] != vals0[j][k] {
							t.Fatalf("zero advantage changed %s[%d]", tr.params[j].Name, k)
						}
					}
				}
			}
		})
	}
}

func snapshot(tr *Trainer) [][]float32 {
	out := make([][]float32, len(tr.params))
	for j, p := range tr.params {
		out[j] = make([]float32, p.Len())
		p.Get(out[j])
	}
	return out
}

func TestMicroBatchesAccumulate(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	exs := examples(t, m)
	one := microBatchTrainer(t, m, a, testConfig().MicroBatch)
	small := microBatchTrainer(t, m, a, 1) // every sequence is longer: each runs alone
	st1, _ := gradientsAgree(t, one, small, exs)
	// The same gradient twice: nothing carries over between calls.
	st3, _ := one.Gradient(context.Background(), exs)
	if st3.GradNorm != st1.GradNorm {
		t.Fatalf("gradient norm %g then %g for the same data", st1.GradNorm, st3.GradNorm)
	}
}

// microBatchTrainer is a LoRA trainer with testConfig's settings and the
// given micro-batch, closed when the test ends.
func microBatchTrainer(t *testing.T, m *llama.Model, a *llama.Adapter, microBatch int) *Trainer {
	t.Helper()
	cfg := testConfig()
	cfg.MicroBatch = microBatch
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// logProbsAgree computes the log-probs of exs with packed and with alone and
// holds every completion token's to within bound of the other's.
func logProbsAgree(t *testing.T, packed, alone *Trainer, exs []Example, bound float64) {
	t.Helper()
	lp1, err := packed.LogProbs(exs)
	if err != nil {
		t.Fatal(err)
	}
	lp2, err := alone.LogProbs(exs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lp1 {
		for k := range lp1[i] {
			if d := math.Abs(float64(lp1[i][k] - lp2[i][k])); d > bound {
				t.Fatalf("sequence %d, token %d: log-prob %g packed, %g alone", i, k, lp1[i][k], lp2[i][k])
			}
		}
	}
}

// gradientsAgree computes the gradient of exs with packed (one micro-batch)
// and with alone (a micro-batch per sequence) and holds them to each other:
// the loss within 1e-5, every gradient entry within 1e-5 + 1e-3 of its
// size. It returns packed's stats and the largest difference.
func gradientsAgree(t *testing.T, packed, alone *Trainer, exs []Example) (StepStats, float64) {
	t.Helper()
	st1, err := packed.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	g1 := snapshotGrads(packed)
	st2, err := alone.Gradient(context.Background(), exs)
	if err != nil {
		t.Fatal(err)
	}
	if st1.MicroBatches != 1 || st2.MicroBatches != len(exs) {
		t.Fatalf("micro-batches %d and %d", st1.MicroBatches, st2.MicroBatches)
	}
	if math.Abs(st1.Loss-st2.Loss) > 1e-5 {
		t.Fatalf("loss %g in one micro-batch, %g a sequence at a time", st1.Loss, st2.Loss)
	}
	worst := 0.0
	for j, g := range snapshotGrads(alone) {
		for k := range g {
			d := math.Abs(float64(g[k] - g1[j][k]))
			if d > 1e-5+1e-3*math.Abs(float64(g1[j][k])) {
				t.Fatalf("%s[%d]: gradient %g a sequence at a time, %g in one micro-batch", packed.params[j].Name, k, g[k], g1[j][k])
			}
			worst = max(worst, d)
		}
	}
	return st1, worst
}

func snapshotGrads(tr *Trainer) [][]float32 {
	out := make([][]float32, len(tr.grads))
	for j, g := range tr.grads {
		out[j] = append([]float32(nil), g...)
	}
	return out
}

func TestBadExamples(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, false)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Step(ctx, nil); err == nil {
		t.Error("empty data must be an error")
	}
	if _, err := tr.Step(ctx, []Example{{Prompt: []llama.Token{1}, Completion: []llama.Token{99999}, Advantage: 1}}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("token outside the vocabulary: %v", err)
	}
	if _, err := tr.Step(ctx, []Example{{Prompt: []llama.Token{1}, Completion: nil, Advantage: 1}}); err == nil {
		t.Error("an empty completion must be an error")
	}
	// (an example longer than the micro-batch is not an error: it runs
	// alone, TestLongSequenceRunsAlone)
}

// helperProcess loads the tiny model with an adapter file in a fresh process
// and prints the log-probs of the test examples.
func helperProcess(adapter string) int {
	m, err := llama.LoadModel(os.Getenv("CONFCLIP_TRAIN_MODEL"), llama.ModelParams{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Close()
	a, err := llama.LoadAdapter(m, adapter)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer a.Close()
	for _, e := range examples(&testing.T{}, m) {
		for _, v := range decodeLogProbs(&testing.T{}, m, a, e) {
			fmt.Println(strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return 0
}

func TestSaveLoadRoundTrip(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, false)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	exs := examples(t, m)
	for i := 0; i < 3; i++ {
		if _, err := tr.Step(context.Background(), exs); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "trained.gguf")
	if err := SaveLoRA(a, "llama", out); err != nil {
		t.Fatal(err)
	}
	var want []float64
	for _, e := range exs {
		want = append(want, decodeLogProbs(t, m, a, e)...)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CONFCLIP_TRAIN_HELPER="+out, "CONFCLIP_TRAIN_MODEL="+tinyPath)
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("fresh process: %v", err)
	}
	lines := strings.Fields(string(got))
	if len(lines) != len(want) {
		t.Fatalf("fresh process printed %d log-probs, want %d", len(lines), len(want))
	}
	moved := false
	base := []float64{}
	for _, e := range exs {
		base = append(base, decodeLogProbs(t, m, nil, e)...)
	}
	for i, l := range lines {
		v, _ := strconv.ParseFloat(l, 64)
		if v != want[i] {
			t.Fatalf("log-prob %d: %v in a fresh process, %v here", i, v, want[i])
		}
		moved = moved || v != base[i]
	}
	if !moved {
		t.Fatal("the trained adapter did not change any log-prob")
	}
}

// TestLoRAOnQuantizedBase trains an adapter on a Q8_0 base model: the
// gradient flows through the quantized weights to the adapter.
func TestLoRAOnQuantizedBase(t *testing.T) {
	q := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	if err := llama.Quantize(tinyPath, q, "q8_0", 0); err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(q, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if ft := m.Info().FileType; ft != "Q8_0" {
		t.Fatalf("file type %s, want Q8_0", ft)
	}
	a := newAdapter(t, m, false)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	e := examples(t, m)[0]
	before := meanLogProb(t, tr, e)
	for i := 0; i < 2; i++ {
		if _, err := tr.Step(context.Background(), []Example{e}); err != nil {
			t.Fatal(err)
		}
	}
	after := meanLogProb(t, tr, e)
	t.Logf("Q8_0 base, advantage +1: mean log-prob %.5f -> %.5f", before, after)
	if after <= before {
		t.Fatalf("training on a quantized base did not raise the log-prob: %g -> %g", before, after)
	}
	got, err := tr.LogProbs([]Example{e})
	if err != nil {
		t.Fatal(err)
	}
	want := decodeLogProbs(t, m, a, e)
	worst := 0.0
	for k := range want {
		worst = math.Max(worst, math.Abs(float64(got[0][k])-want[k]))
	}
	t.Logf("Q8_0 base: max |training forward - decode| = %.3g", worst)
	if worst > 1e-4 {
		t.Fatalf("training forward and decode differ by %g on a quantized base", worst)
	}
	if err := llama.Quantize(tinyPath, q, "q3_xyz", 0); err == nil {
		t.Fatal("an unknown quantization type must be an error")
	}
}
