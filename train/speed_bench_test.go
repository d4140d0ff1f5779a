package train

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/reference"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

// -speed-md FILE (make bench: docs/speed.md) rewrites the tables between the
// file's "<!-- speed table -->" and "<!-- end speed table -->" lines (and
// the PyTorch comparison's "pytorch table" markers).
var speedMD = flag.String("speed-md", "", "rewrite the speed table in this markdown file (between its speed-table markers)")

// speedTypes are the weight types of the speed table ("" the F32 model).
var speedTypes = []string{"", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m"}

func speedTypeName(q string) string {
	if q == "" {
		return "F32"
	}
	return strings.ToUpper(q)
}

// speedModel is bench-100m in weight type q, quantized once into
// build/models.
func speedModel(b *testing.B, q string) string {
	bench := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(bench, modelgen.Bench()); err != nil {
		b.Skipf("NOT RUN: %v", err)
	}
	if q == "" {
		return bench
	}
	p, err := quantizedBench(bench, q)
	if err != nil {
		b.Skipf("NOT RUN on %s: %v", q, err)
	}
	return p
}

type speedRow struct {
	engine, cLoop float64 // sampled rollout, tokens/s
	forced        float64 // teacher forcing, inference layout
	forcedTrain   float64 // teacher forcing, training layout (NoRepack)
	step          float64 // training step
}

// BenchmarkSpeedTable is docs/speed.md's table: for bench-100m in F32, F16,
// Q8_0, Q4_0, Q4_K_M and Q5_K_M, on all cores, (1) a sampled rollout (G=8 x
// 128 tokens, temperature 1, log-probs) against the C loop on llama.cpp's API
// (reference.BatchedSampled), (2) forward-only teacher forcing (16 x (16
// + 48) tokens) with the weights as inference loads them (repacked where
// llama.cpp has a CPU layout for the type) and as training loads them, each
// against Q8_0's, and (3) a LoRA training step (rank 8, default
// micro-batch) against the forward pass on the same model handle. Each side
// is the best of its runs, the two sides of a comparison alternating.
func BenchmarkSpeedTable(b *testing.B) {
	rows := map[string]speedRow{}
	threads := runtime.NumCPU()
	for _, q := range speedTypes {
		b.Run(speedTypeName(q), func(b *testing.B) {
			path := speedModel(b, q)
			var r speedRow
			r.engine, r.cLoop = speedRollout(b, path, threads)
			r.forced = speedForce(b, path, threads, false)
			r.forcedTrain = speedForce(b, path, threads, true)
			r.step = speedStep(b, path, threads)
			b.ReportMetric(r.engine/r.cLoop, "rollout/C")
			b.ReportMetric(r.forced, "forced_tok/s")
			if r.step > 0 {
				b.ReportMetric(r.step/r.forcedTrain, "step/forward")
			}
			rows[q] = r
		})
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "bench-100m (%d threads, %s; load average at the end %s). Tokens/s, best of each side's runs.\n\n", threads, runtime.GOARCH, testutil.LoadAverage())
	fmt.Fprintln(&out, "| weights | rollout: C loop | rollout: confclip | confclip/C | teacher forcing (inference layout) | / Q8_0 | teacher forcing (training layout) | / Q8_0 | training step | step/forward (training layout) |")
	fmt.Fprintln(&out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	ref := rows["q8_0"]
	for _, q := range speedTypes {
		r, ok := rows[q]
		if !ok {
			continue
		}
		step, ratio := fmt.Sprintf("%.0f", r.step), fmt.Sprintf("%.2f", r.step/r.forcedTrain)
		if r.step == 0 {
			step, ratio = "refused (no CPU backward through "+speedTypeName(q)+")", "-"
		}
		fmt.Fprintf(&out, "| %s | %.0f | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f | %s | %s |\n", speedTypeName(q),
			r.cLoop, r.engine, r.engine/r.cLoop, r.forced, r.forced/ref.forced, r.forcedTrain, r.forcedTrain/ref.forcedTrain, step, ratio)
	}
	fmt.Printf("\nSpeed table:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := testutil.RewriteMarked(*speedMD, "speed table", out.String()); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("wrote the table into %s\n", *speedMD)
	}
}

// speedRollout times the engine's sampled rollout against the C loop,
// alternating, three of each.
func speedRollout(b *testing.B, path string, threads int) (engine, cLoop float64) {
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const group, gen = 8, 128
	text := "What is 12+7? Answer:"
	prompt, err := m.Tokenize(text, true, false)
	if err != nil {
		b.Fatal(err)
	}
	nctx := group * (len(prompt) + gen + 8)
	e, err := rollout.NewEngine(m, rollout.Options{Group: group, MaxTokens: gen, Parallel: group, NCtx: nctx, Seed: 1,
		Threads: threads, Params: sampler.Params{Temperature: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	o := e.Options()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: o.NBatch, NSeqMax: group, Threads: threads,
		FlashAttn: o.FlashAttnMode(), TypeK: o.KVCacheType(), TypeV: o.KVCacheType()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	seed := uint64(0)
	runC := func() float64 {
		seed++
		t0 := time.Now()
		n, _, err := reference.BatchedSampled(c, prompt, group, gen, seed)
		if err != nil {
			b.Fatal(err)
		}
		return float64(n) / time.Since(t0).Seconds()
	}
	runE := func() float64 {
		st, err := e.Generate(context.Background(), []dataset.Prompt{{ID: "bench", Prompt: text}}, func([]dataset.Rollout) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		return float64(st.Tokens) / st.Elapsed.Seconds()
	}
	runE() // warm up
	runC()
	for i := range 3 {
		if i%2 == 0 {
			engine, cLoop = max(engine, runE()), max(cLoop, runC())
		} else {
			cLoop, engine = max(cLoop, runC()), max(engine, runE())
		}
	}
	return engine, cLoop
}

// speedForce times teacher forcing of the training benchmark's 16 records
// with the weights in the inference layout or the training one (NoRepack).
func speedForce(b *testing.B, path string, threads int, noRepack bool) float64 {
	m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: noRepack})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	e, err := rollout.NewEngine(m, rollout.Options{Group: 1, MaxTokens: 1, Parallel: 16, NCtx: 16 * 64, NBatch: 512, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	_, recs := benchExamples(m.NVocab())
	run := func() float64 {
		t0 := time.Now()
		forceAll(b, e, recs)
		return float64(16*64) / time.Since(t0).Seconds()
	}
	run() // warm up
	best := 0.0
	for range 3 {
		best = max(best, run())
	}
	return best
}

// speedStep times LoRA training steps (rank 8, the default micro-batch) on
// the training benchmark's 16 examples.
func speedStep(b *testing.B, path string, threads int) float64 {
	m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
	defer a.Close()
	exs, _ := benchExamples(m.NVocab())
	cfg := DefaultConfig()
	cfg.Threads = threads
	tr, err := NewLoRATrainer(m, a, cfg)
	if err != nil {
		// F16 and BF16 bases are refused on the CPU (no backward product)
		b.Logf("training step on %s: %v", path, err)
		return 0
	}
	defer tr.Close()
	run := func() float64 {
		t0 := time.Now()
		if _, err := tr.Step(context.Background(), exs); err != nil {
			b.Fatal(err)
		}
		return float64(16*64) / time.Since(t0).Seconds()
	}
	run() // warm up
	best := 0.0
	for range 2 {
		best = max(best, run())
	}
	return best
}
