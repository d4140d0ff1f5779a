package train

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/testkit/testutil"
)

// -profile (go test ./train -bench TrainAgainstForward -args -profile)
// prints the per-op profile of one training step and one forward per model.
var profileFlag = flag.Bool("profile", false, "print a per-op profile (time and bytes by ggml op) of one training step per benchmark model")

// benchModel is one model of the training benchmark, at the default
// micro-batch (sized from the model) unless microBatch is set.
type benchModel struct {
	name, path string
	microBatch int
}

// benchModels are the tiny test model, stories260K when ../shared has it,
// and the generated bench-100m model in F32, Q8_0 and Q4_K_M (LoRA over a
// quantized frozen base), each written once under build/models.
func benchModels(b *testing.B) []benchModel {
	models := []benchModel{{name: "tiny", path: tinyPath}}
	if p := filepath.Join(testutil.SharedDir(), "stories260K.gguf"); fileExists(p) {
		models = append(models, benchModel{name: "stories260K", path: p})
	} else {
		b.Logf("NOT RUN on stories260K: %s is absent", p)
	}
	bench := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(bench, modelgen.Bench()); err != nil {
		b.Logf("NOT RUN on bench-100m: %v", err)
		return models
	}
	// the default micro-batch keeps bench-100m's activations within 15% of
	// its weights (one 64-token sequence a pass); 512 packs 8, faster and
	// about twice the memory
	models = append(models, benchModel{name: "bench-100m", path: bench},
		benchModel{name: "bench-100m, micro-batch 512", path: bench, microBatch: 512})
	for _, q := range []string{"q8_0", "q4_k_m"} {
		p, err := quantizedBench(bench, q)
		if err != nil {
			b.Logf("NOT RUN on bench-100m %s: %v", q, err)
			continue
		}
		models = append(models, benchModel{name: "bench-100m " + strings.ToUpper(q), path: p})
	}
	return models
}

// quantizedBench is the bench model at path quantized to q, written once
// beside it (bench-100m-q8_0.gguf, ...).
func quantizedBench(bench, q string) (string, error) {
	p := strings.TrimSuffix(bench, ".gguf") + "-" + q + ".gguf"
	if fileExists(p) {
		return p, nil
	}
	return p, llama.Quantize(bench, p, q, 0)
}

// forceAll teacher-forces the records afresh (their log-probs cleared
// first, so every call does the whole work).
func forceAll(b *testing.B, eng *rollout.Engine, recs []*dataset.Rollout) {
	for _, r := range recs {
		r.Logprobs, r.Entropies = nil, nil
	}
	if err := eng.TeacherForce(context.Background(), recs); err != nil {
		b.Fatal(err)
	}
}

// benchExamples are 16 sequences of a 16-token prompt and a 48-token
// completion of random tokens, as training examples and as rollout records.
func benchExamples(nv int) ([]Example, []*dataset.Rollout) {
	rng := rand.New(rand.NewPCG(1, 2))
	var exs []Example
	var recs []*dataset.Rollout
	for i := 0; i < 16; i++ {
		p := make([]llama.Token, 16)
		c := make([]llama.Token, 48)
		p[0] = 1
		for j := 1; j < len(p); j++ {
			p[j] = llama.Token(3 + rng.IntN(nv-3))
		}
		for j := range c {
			c[j] = llama.Token(3 + rng.IntN(nv-3))
		}
		exs = append(exs, Example{Prompt: p, Completion: c, Advantage: rng.Float64() - 0.5})
		recs = append(recs, &dataset.Rollout{PromptID: fmt.Sprint(i), PromptTokens: p, Tokens: c})
	}
	return exs, recs
}

type trainRow struct {
	microBatch        int
	train, fwd, ratio float64
	median            float64 // step/forward, median over the pairs
	pairs             int
}

// BenchmarkTrainAgainstForward times a LoRA training step (forward and
// backward through llama_pg_eval, AdamW) against forward-only teacher forcing
// of the same sequences through the rollout engine, alternating in one run,
// and prints the step/forward ratio of every model as a table, then the
// peak memory of `confclip train` on bench-100m against its weights.
func BenchmarkTrainAgainstForward(b *testing.B) {
	rows := map[string]trainRow{}
	models := benchModels(b)
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			r := trainAgainstForward(b, mc)
			rows[mc.name] = r
		})
	}
	fmt.Printf("\nTraining step against a forward pass (16 sequences x 64 tokens, the default micro-batch, %d threads, paired in one run):\n\n", runtime.NumCPU())
	fmt.Println("| model | micro-batch | training tokens/s | forward tokens/s | a step costs (totals) | median pair |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, mc := range models {
		if r, ok := rows[mc.name]; ok {
			fmt.Printf("| %s | %d | %.0f | %.0f | %.2fx a forward | %.2fx (%d pairs) |\n", mc.name, r.microBatch, r.train, r.fwd, r.ratio, r.median, r.pairs)
		}
	}
	fmt.Println()
	trainPeakMemory(b)
}

func trainAgainstForward(b *testing.B, mc benchModel) trainRow {
	// NoRepack: the training context needs quantized weights in the file's
	// layout (the forward pass runs on the same model handle)
	m, err := llama.LoadModel(mc.path, llama.ModelParams{NoRepack: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() }) // after the adapter's
	a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
	exs, recs := benchExamples(m.NVocab())
	cfg := DefaultConfig() // the micro-batch sized from the model
	cfg.MicroBatch = mc.microBatch
	cfg.Threads = runtime.NumCPU()
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	eng, err := rollout.NewEngine(m, rollout.Options{Group: 1, MaxTokens: 1, Parallel: 16, NCtx: 16 * 64, NBatch: 512, Threads: runtime.NumCPU()})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	if err := eng.SetAdapter(a, 1); err != nil {
		b.Fatal(err)
	}
	forward := func() time.Duration {
		t0 := time.Now()
		forceAll(b, eng, recs)
		return time.Since(t0)
	}
	step := func() time.Duration {
		t0 := time.Now()
		if _, err := tr.Step(context.Background(), exs); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	// one of each first: the first evaluation of a context allocates and
	// faults in its buffers
	step()
	forward()
	b.ResetTimer()
	tokens := 16 * 64
	var tTrain, tFwd time.Duration
	var ratios []float64
	// b.N pairs, and more on a small model until 3 s are spent: one pair
	// of milliseconds is all noise on a shared machine
	t0 := time.Now()
	for i := 0; i < b.N || time.Since(t0) < 3*time.Second; i++ {
		// alternate which goes first: the machine's load drifts
		var ts, tf time.Duration
		if i%2 == 0 {
			ts, tf = step(), forward()
		} else {
			tf, ts = forward(), step()
		}
		tTrain += ts
		tFwd += tf
		ratios = append(ratios, ts.Seconds()/tf.Seconds())
	}
	n := len(ratios)
	r := trainRow{microBatch: tr.Config().MicroBatch, train: float64(tokens*n) / tTrain.Seconds(), fwd: float64(tokens*n) / tFwd.Seconds(), median: testutil.Median(ratios), pairs: n}
	r.ratio = r.fwd / r.train
	b.ReportMetric(r.train, "train-tok/s")
	b.ReportMetric(r.fwd, "forward-tok/s")
	b.ReportMetric(r.ratio, "step/forward")
	b.ReportMetric(r.median, "step/forward-median")
	fmt.Printf("%s: training %.0f tokens/s, forward-only teacher forcing %.0f tokens/s: a step costs %.2fx a forward pass (median of %d pairs %.2fx)\n",
		mc.name, r.train, r.fwd, r.ratio, r.pairs, r.median)
	if *profileFlag {
		profileStep(b, m, a, cfg, exs, mc.name)
	}
	return r
}

// profileStep prints the per-op profile of one training step (its own
// trainer, so the timed one runs without the callback's overhead).
func profileStep(b *testing.B, m *llama.Model, a *llama.Adapter, cfg Config, exs []Example, name string) {
	cfg.Profile = true
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Step(context.Background(), exs); err != nil {
		b.Fatal(err)
	}
	tr.ResetProfile()
	if _, err := tr.Step(context.Background(), exs); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("\nProfile of one training step on %s (%d sequences, %d threads):\n\n", name, len(exs), cfg.Threads)
	llama.WriteProfile(os.Stdout, tr.Profile())
	fmt.Println()
}

// trainPeakMemory runs `confclip train` (../bin/confclip) on bench-100m
// with 32 completions of 50-70 tokens at the default micro-batch (one
// step: the buffers are all allocated by its first micro-batch) and
// compares its peak resident memory with the weights plus the memory
// budget the default micro-batch was sized for (train.memory: a quarter
// of the free memory by default).
func trainPeakMemory(b *testing.B) {
	bin, _ := filepath.Abs(filepath.Join("..", "bin", "confclip"))
	model, _ := filepath.Abs(filepath.Join("..", modelgen.BenchPath))
	if !fileExists(bin) || !fileExists(model) {
		fmt.Printf("peak memory of confclip train: NOT RUN (needs %s, from make, and %s)\n", bin, model)
		return
	}
	dir := b.TempDir()
	data := filepath.Join(dir, "train.jsonl")
	var sb strings.Builder
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 32; i++ {
		ex := dataset.TrainExample{PromptID: fmt.Sprint(i / 8), Sample: i % 8, Advantage: rng.Float64() - 0.5}
		ex.PromptIDs = []int32{1}
		for j := 0; j < 15; j++ {
			ex.PromptIDs = append(ex.PromptIDs, int32(3+rng.IntN(32000)))
		}
		for j := 0; j < 50+rng.IntN(20); j++ {
			ex.CompletionIDs = append(ex.CompletionIDs, int32(3+rng.IntN(32000)))
		}
		line, _ := json.Marshal(ex)
		sb.Write(append(line, '\n'))
	}
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "train", "--model", model, "--data", data, "--adapter-out", filepath.Join(dir, "out.gguf"), "--steps", "1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("confclip train: %v\n%s", err, stderr.String())
	}
	// its own report of its peak (VmHWM): the rusage of a child started by
	// Go includes this process's peak, which it shared until exec
	var sum struct {
		MicroBatch         int   `json:"micro_batch"`
		ComputeBufferBytes int64 `json:"compute_buffer_bytes"`
		PeakRSSBytes       int64 `json:"peak_rss_bytes"`
		MemoryBudgetBytes  int64 `json:"memory_budget_bytes"`
	}
	if err := json.Unmarshal(out, &sum); err != nil || sum.PeakRSSBytes == 0 {
		b.Fatalf("confclip train's summary has no peak memory (%v): %s", err, out)
	}
	rss := float64(sum.PeakRSSBytes) / (1 << 20)
	st, _ := os.Stat(model)
	w := float64(st.Size()) / (1 << 20)
	budget := float64(sum.MemoryBudgetBytes) / (1 << 20)
	verdict := "met"
	if rss > w+budget {
		verdict = "NOT met"
	}
	fmt.Printf("peak memory of confclip train on bench-100m (32 completions of 50-70 tokens, default micro-batch %d, one step): %.0f MiB for %.0f MiB of weights (%.2fx); bound: the weights + the memory budget, %.0f MiB: %s; training activations %.0f MiB\n\n",
		sum.MicroBatch, rss, w, rss/w, w+budget, verdict, float64(sum.ComputeBufferBytes)/(1<<20))
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
