package rollout_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
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

// benchModelPath is the ~100M-parameter benchmark model, generated once into
// build/models (about 400 MB, F32).
var benchModelPath = filepath.Join("..", modelgen.BenchPath)

var benchOnce sync.Once
var benchErr error

// benchModels are the models the benchmarks run on, with a prompt each.
func benchModels(b *testing.B) []struct {
	name, path, prompt string
} {
	benchOnce.Do(func() { benchErr = modelgen.Cached(benchModelPath, modelgen.Bench()) })
	var ms []struct{ name, path, prompt string }
	if benchErr != nil {
		b.Logf("NOT RUN on bench-100m: generating %s failed: %v", benchModelPath, benchErr)
	} else {
		ms = append(ms, struct{ name, path, prompt string }{"bench-100m", benchModelPath, "What is 12+7? Answer:"})
	}
	dir := testutil.SharedDir()
	if p := filepath.Join(dir, "stories260K.gguf"); fileExists(p) {
		ms = append(ms, struct{ name, path, prompt string }{"stories260K", p, "Once upon a time"})
	} else {
		b.Logf("NOT RUN on stories260K: %s is absent", p)
	}
	if len(ms) == 0 {
		b.Skip("NOT RUN: no model to benchmark")
	}
	return ms
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// timeGenerate runs one Generate call and returns its completion tokens.
func timeGenerate(b *testing.B, e *rollout.Engine, prompt string) int {
	st, err := e.Generate(context.Background(), []dataset.Prompt{{ID: "bench", Prompt: prompt}}, func([]dataset.Rollout) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	if len(st.Errors) > 0 {
		b.Fatal(st.Errors)
	}
	return st.Tokens
}

// rate runs f, which returns the tokens it generated, and returns tokens/s.
// The benchmarks below alternate the two things they compare and keep each
// one's best rate, so that load from other processes on the machine, which
// only ever slows a run down, touches the ratio as little as possible.
func rate(f func() int) float64 {
	t := time.Now()
	n := f()
	return float64(n) / time.Since(t).Seconds()
}

// BenchmarkGroupBatched times G=8 sampled completions of one prompt decoded
// together (Parallel 8) against the same engine generating them one after
// another (Parallel 1), in the same run, and reports both rates and their
// ratio.
func BenchmarkGroupBatched(b *testing.B) {
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			batched, seq := groupEngines(b, loadModel(b, bm.path), 32, 128)
			timeGenerate(b, batched, bm.prompt) // warm up
			timeGenerate(b, seq, bm.prompt)
			var rb, rs float64
			b.ResetTimer()
			for range b.N {
				rb = max(rb, rate(func() int { return timeGenerate(b, batched, bm.prompt) }))
				rs = max(rs, rate(func() int { return timeGenerate(b, seq, bm.prompt) }))
			}
			b.ReportMetric(rb, "batched_tok/s")
			b.ReportMetric(rs, "one-by-one_tok/s")
			b.ReportMetric(rb/rs, "ratio")
		})
	}
}

// groupEngines are two engines sampling G = 8 completions of maxTokens on
// every core (temperature 1, seed 1): one decodes the group together
// (Parallel 8), the other one sequence at a time (Parallel 1), each
// sequence's context ctx tokens.
func groupEngines(b *testing.B, m *llama.Model, maxTokens, ctx int) (together, oneByOne *rollout.Engine) {
	o := rollout.Options{Group: 8, MaxTokens: maxTokens, Seed: 1, Threads: runtime.NumCPU(), NCtx: 8 * ctx,
		Params: sampler.Params{Temperature: 1}}
	o.Parallel = 8
	together = newEngine(b, m, o)
	o.Parallel, o.NCtx = 1, ctx
	return together, newEngine(b, m, o)
}

// referenceContexts are the C loops' two contexts, closed when the benchmark
// ends: one with the engine's settings o (its KV type and flash attention),
// and one with llama.cpp's defaults (F16 KV cache, flash attention auto:
// the zero values; faster with more threads, at the cost of log-probs that
// agree less with teacher forcing, docs/rollout.md). Only the sizes, the
// unified cache the shared prompt needs and the threads are set.
func referenceContexts(b *testing.B, m *llama.Model, o rollout.Options, nctx, group, threads int) (ours, dflt *llama.Context) {
	var err error
	ours, err = llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: o.NBatch, NSeqMax: group,
		Threads: threads, FlashAttn: o.FlashAttnMode(), TypeK: o.KVCacheType(), TypeV: o.KVCacheType()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ours.Close() })
	dflt, err = llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: o.NBatch, NSeqMax: group, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dflt.Close() })
	return ours, dflt
}

// BenchmarkEngineVsReference times the engine's greedy generation (G=8 on
// one prompt, log-probs and entropies recorded) against a C loop making the
// same llama_decode calls with an argmax in C (reference.BatchedGreedy)
// on two contexts: one with the engine's settings (F32 KV cache, flash
// attention on for a model on the CPU alone) and one with llama.cpp's defaults (llama_context_default_params:
// F16 KV cache, flash attention auto; only the sizes, the unified cache the
// shared prompt needs and the threads set). It reports the three rates and
// engine/reference for both, the three runs alternating in one loop.
func BenchmarkEngineVsReference(b *testing.B) {
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			const group, maxTokens, nctx = 8, 32, 8 * 128
			m := loadModel(b, bm.path)
			e := newEngine(b, m, rollout.Options{Group: group, MaxTokens: maxTokens, Parallel: group, NCtx: nctx,
				Threads: runtime.NumCPU(), Params: sampler.Params{Temperature: 0}})
			o := e.Options()
			ours, dflt := referenceContexts(b, m, o, nctx, group, runtime.NumCPU())
			prompt, err := m.Tokenize(bm.prompt, true, false)
			if err != nil {
				b.Fatal(err)
			}
			runRef := func(c *llama.Context) func() int {
				return func() int {
					n, err := reference.BatchedGreedy(c, prompt, group, maxTokens)
					if err != nil {
						b.Fatal(err)
					}
					return n
				}
			}
			if ne, nr := timeGenerate(b, e, bm.prompt), runRef(ours)(); ne != nr {
				b.Logf("engine generated %d tokens, reference %d", ne, nr)
			}
			runRef(dflt)()
			var re, rr, rd float64
			b.ResetTimer()
			for range b.N {
				re = max(re, rate(func() int { return timeGenerate(b, e, bm.prompt) }))
				rr = max(rr, rate(runRef(ours)))
				rd = max(rd, rate(runRef(dflt)))
			}
			b.ReportMetric(re, "engine_tok/s")
			b.ReportMetric(rr, "reference_tok/s")
			b.ReportMetric(rd, "reference-llama-defaults_tok/s")
			b.ReportMetric(re/rr, "ratio")
			b.ReportMetric(re/rd, "ratio-llama-defaults")
			fmt.Printf("%s, G=%d x %d tokens, %d threads: engine %.0f tokens/s; C loop with the engine's context settings (KV %s, flash attention %s) %.0f tokens/s, engine/C %.2f; C loop with llama.cpp's defaults (KV f16, flash attention auto) %.0f tokens/s, engine/C %.2f\n",
				bm.name, group, maxTokens, runtime.NumCPU(), re, o.KVType, o.FlashAttn, rr, re/rr, rd, re/rd)
		})
	}
}

// threadCounts are the thread counts the engine-against-C benchmarks run
// at: 1, 2 and all the machine's cores.
func threadCounts() []int {
	ts := []int{1}
	for _, t := range []int{2, runtime.NumCPU()} {
		if t > ts[len(ts)-1] {
			ts = append(ts, t)
		}
	}
	return ts
}

// BenchmarkEngineVsReferenceSampled times what a rollout does, G=8 sampled
// completions of 128 tokens of one prompt at temperature 1 with each token's
// log-probability recorded, against a C loop on llama.cpp's API doing the
// same (reference.BatchedSampled: the prompt decoded once, one decode
// per step, a full-softmax draw and the token's log-probability in C) on a
// context with the engine's settings (the ratio that measures the engine's
// own overhead) and on one with llama.cpp's defaults (F16 KV cache, flash
// attention auto: what a llama.cpp user gets, faster with more threads), at
// 1, 2 and all cores' threads. The
// two sides alternate, which goes first swapping every pair, and each
// keeps its best rate; the ratios are engine/C. The greedy comparison
// (BenchmarkEngineVsReference) stays beside it: it times the decode loop
// without the per-token softmax.
func BenchmarkEngineVsReferenceSampled(b *testing.B) {
	type res struct {
		name          string
		threads       int
		engine, cLoop float64
		cDefaults     float64 // the C loop on llama.cpp's default context settings
		engineDflt    float64 // the engine with KVType f16 and FlashAttn auto
	}
	var rows []res
	for _, bm := range benchModels(b) {
		for _, threads := range threadCounts() {
			b.Run(fmt.Sprintf("%s/threads=%d", bm.name, threads), func(b *testing.B) {
				const group, maxTokens = 8, 128
				m := loadModel(b, bm.path)
				prompt, err := m.Tokenize(bm.prompt, true, false)
				if err != nil {
					b.Fatal(err)
				}
				nctx := group * (len(prompt) + maxTokens + 8)
				e := newEngine(b, m, rollout.Options{Group: group, MaxTokens: maxTokens, Parallel: group, NCtx: nctx, Seed: 1,
					Threads: threads, Params: sampler.Params{Temperature: 1}})
				o := e.Options()
				ref, dflt := referenceContexts(b, m, o, nctx, group, threads)
				seed := uint64(0)
				runRef := func(c *llama.Context) func() int {
					return func() int {
						seed++
						n, _, err := reference.BatchedSampled(c, prompt, group, maxTokens, seed)
						if err != nil {
							b.Fatal(err)
						}
						return n
					}
				}
				// the engine on the same defaults, against the C loop there
				ed := newEngine(b, m, rollout.Options{Group: group, MaxTokens: maxTokens, Parallel: group, NCtx: nctx, Seed: 1,
					Threads: threads, Params: sampler.Params{Temperature: 1}, KVType: "f16", FlashAttn: "auto"})
				runEngine := func() int { return timeGenerate(b, e, bm.prompt) }
				runEngineD := func() int { return timeGenerate(b, ed, bm.prompt) }
				runEngine() // warm up
				runEngineD()
				runRef(ref)()
				runRef(dflt)()
				var re, rr, rd, red float64
				b.ResetTimer()
				for i := range 2 * b.N {
					if i%2 == 0 {
						re = max(re, rate(runEngine))
						rr = max(rr, rate(runRef(ref)))
						rd = max(rd, rate(runRef(dflt)))
						red = max(red, rate(runEngineD))
					} else {
						red = max(red, rate(runEngineD))
						rd = max(rd, rate(runRef(dflt)))
						rr = max(rr, rate(runRef(ref)))
						re = max(re, rate(runEngine))
					}
				}
				b.ReportMetric(re, "engine_tok/s")
				b.ReportMetric(rr, "C_tok/s")
				b.ReportMetric(rd, "C-llama-defaults_tok/s")
				b.ReportMetric(re/rr, "ratio")
				b.ReportMetric(re/rd, "ratio-llama-defaults")
				b.ReportMetric(red/rd, "ratio-both-on-llama-defaults")
				rows = append(rows, res{bm.name, threads, re, rr, rd, red})
			})
		}
	}
	fmt.Printf("\nSampled rollout against the C loop (G=8 x 128 tokens, temperature 1, log-prob per token; best of each side, alternating; load average %s):\n\n", testutil.LoadAverage())
	fmt.Println("| model | threads | C loop, engine's settings (F32 KV, flash attention on) | engine | engine/C | C loop, llama.cpp's defaults (F16 KV, flash attention auto) | engine/C | engine on those defaults | engine/C, both on the defaults |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	last := map[string]res{}
	var order []string
	for _, r := range rows {
		k := fmt.Sprintf("%s/%d", r.name, r.threads)
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = r
	}
	for _, k := range order {
		r := last[k]
		fmt.Printf("| %s | %d | %.0f | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f |\n", r.name, r.threads, r.cLoop, r.engine, r.engine/r.cLoop, r.cDefaults, r.engine/r.cDefaults, r.engineDflt, r.engineDflt/r.cDefaults)
	}
	fmt.Println()
}

// ladder are generated models between the tiny one and bench-100m, for the
// thread-count crossover: name, spec.
func ladder() []modelgen.Spec {
	var out []modelgen.Spec
	for _, l := range []struct{ embd, layers, ff, vocab int }{
		{128, 2, 256, 1000}, {128, 4, 384, 2000}, {256, 4, 768, 4000}, {384, 6, 1024, 8000}, {512, 8, 1536, 16000},
	} {
		s := modelgen.Tiny()
		s.Name = fmt.Sprintf("confclip-ladder-%d-%d", l.embd, l.layers)
		s.Embd, s.Layers, s.Heads, s.HeadsKV, s.FF, s.ExtraVocab = l.embd, l.layers, l.embd/64, l.embd/128, l.ff, l.vocab
		out = append(out, s)
	}
	return out
}

// BenchmarkThreads times G=8 sampled rollouts (32 tokens) with one thread
// against all the machine's cores on models from the tiny test model to
// bench-100m (stories260K and generated models in between, written once
// under build/models), in pairs that alternate which side goes first,
// keeping each side's best rate and the median of the pairs' ratios (a
// shared machine's load swings within seconds), and prints the table with
// the thread count DefaultThreads picks: the crossover ParamsPerThread is
// read off it.
func BenchmarkThreads(b *testing.B) {
	type row struct {
		name   string
		params uint64
		def    int
		one    float64
		all    float64
		median float64 // all cores / one thread, median over the pairs
	}
	var rows []row
	models := []struct{ name, path, prompt string }{{"tiny", tinyPath, "12+7="}}
	for _, s := range ladder() {
		p := filepath.Join("..", "build", "models", s.Name+".gguf")
		if err := modelgen.Cached(p, s); err != nil {
			b.Logf("NOT RUN on %s: %v", s.Name, err)
			continue
		}
		models = append(models, struct{ name, path, prompt string }{strings.TrimPrefix(s.Name, "confclip-"), p, "What is 12+7? Answer:"})
	}
	models = append(models, benchModels(b)...)
	cores := runtime.NumCPU()
	for _, bm := range models {
		b.Run(bm.name, func(b *testing.B) {
			m := loadModel(b, bm.path)
			o := rollout.Options{Group: 8, MaxTokens: 32, Parallel: 8, NCtx: 8 * 128, Seed: 1,
				Params: sampler.Params{Temperature: 1}}
			o.Threads = 1
			one := newEngine(b, m, o)
			o.Threads = cores
			all := newEngine(b, m, o)
			timeGenerate(b, one, bm.prompt) // warm up
			timeGenerate(b, all, bm.prompt)
			var r1, ra float64
			var ratios []float64
			b.ResetTimer()
			// 3 pairs per b.N, and more on a small model until 3 s are spent
			t0 := time.Now()
			for i := 0; i < 3*b.N || time.Since(t0) < 3*time.Second; i++ {
				var p1, pa float64
				if i%2 == 0 {
					p1 = rate(func() int { return timeGenerate(b, one, bm.prompt) })
					pa = rate(func() int { return timeGenerate(b, all, bm.prompt) })
				} else {
					pa = rate(func() int { return timeGenerate(b, all, bm.prompt) })
					p1 = rate(func() int { return timeGenerate(b, one, bm.prompt) })
				}
				r1, ra = max(r1, p1), max(ra, pa)
				ratios = append(ratios, pa/p1)
			}
			med := testutil.Median(ratios)
			b.ReportMetric(r1, "1-thread_tok/s")
			b.ReportMetric(ra, "all-cores_tok/s")
			b.ReportMetric(med, "all/1-median")
			rows = append(rows, row{bm.name, m.Info().Params, rollout.DefaultThreads(m), r1, ra, med})
		})
	}
	fmt.Printf("\nRollout threads (G=8 x 32 sampled tokens, best of each side, alternating; %d cores; ParamsPerThread %d):\n\n", cores, rollout.ParamsPerThread)
	fmt.Println("| model | parameters | 1 thread tokens/s | all cores tokens/s | all/1 (median pair) | default threads | default tokens/s |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	last := map[string]row{} // b.Run's last call per model has the most iterations
	for _, r := range rows {
		last[r.name] = r
	}
	for _, bm := range models {
		r, ok := last[bm.name]
		if !ok {
			continue
		}
		d := r.one
		if r.def == cores {
			d = r.all
		} else if r.def != 1 {
			d = 0 // between 1 and all cores: not measured here
		}
		fmt.Printf("| %s | %.2fM | %.0f | %.0f | %.2f | %d | %.0f |\n", r.name, float64(r.params)/1e6, r.one, r.all, r.median, r.def, d)
	}
	fmt.Println()
}

// vmKB reads a field (VmHWM, VmRSS) of /proc/self/status in KiB.
func vmKB(b *testing.B, field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("NOT RUN: no /proc/self/status on this system")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return v
		}
	}
	b.Skipf("NOT RUN: no %s in /proc/self/status", field)
	return 0
}

// BenchmarkPeakMemory reports the process's peak RSS during a G=8 rollout
// against what the run needs: the model's tensors plus the KV cache (F32
// K and V for NCtx cells in every layer). The peak is reset first
// (/proc/self/clear_refs 5), so it covers loading and generating only; it
// also holds the Go runtime and the test binary (base_MB, the RSS before).
func BenchmarkPeakMemory(b *testing.B) {
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			const nctx = 8 * 128
			runtime.GC()
			if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
				b.Skipf("NOT RUN: cannot reset the peak RSS: %v", err)
			}
			base := vmKB(b, "VmRSS")
			var need float64
			for range b.N {
				m, err := llama.LoadModel(bm.path, llama.ModelParams{})
				if err != nil {
					b.Fatal(err)
				}
				e, err := rollout.NewEngine(m, rollout.Options{Group: 8, MaxTokens: 32, Parallel: 8, NCtx: nctx,
					Threads: runtime.NumCPU(), Params: sampler.Params{Temperature: 1}})
				if err != nil {
					b.Fatal(err)
				}
				timeGenerate(b, e, bm.prompt)
				info := m.Info()
				kvDim := info.Embd / info.Heads * info.HeadsKV
				kv := float64(nctx * info.Layers * 2 * kvDim * 4)
				need = float64(info.SizeBytes) + kv
				b.ReportMetric(float64(info.SizeBytes)/(1<<20), "model_MB")
				b.ReportMetric(kv/(1<<20), "kv_MB")
				e.Close()
				m.Close()
			}
			peak := vmKB(b, "VmHWM")
			b.ReportMetric(base/1024, "base_MB")
			b.ReportMetric(peak/1024, "peak_MB")
			b.ReportMetric((peak-base)*1024/need, "(peak-base)/(model+kv)")
		})
	}
}

// BenchmarkManySequences times a greedy evaluation's work, 128 different
// prompts with one completion each, decoded 64 sequences at a time against
// 16 at a time, in the same run (alternating, best of each). 64 queries in a
// step put upstream's tiled flash-attention kernel on a cache where each
// query sees only its own sequence's cells; before patch 0059 it multiplied
// every query by every cell, and 64 at a time ran at 0.72 of 16 at a time
// (SmolLM2-135M F32, 2 threads; docs/speed.md). The ratio is 64/16.
func BenchmarkManySequences(b *testing.B) {
	for _, bm := range benchModels(b) {
		if bm.name != "bench-100m" {
			continue
		}
		b.Run(bm.name, func(b *testing.B) {
			m := loadModel(b, bm.path)
			var prompts []dataset.Prompt
			for i := range 128 {
				prompts = append(prompts, dataset.Prompt{ID: fmt.Sprint(i), Prompt: fmt.Sprintf("What is %d+%d? Answer:", 3*i+1, 7*i%23)})
			}
			eng := func(parallel int) *rollout.Engine {
				return newEngine(b, m, rollout.Options{Group: 1, MaxTokens: 32, Parallel: parallel, SeqCtx: 64, Seed: 1,
					Params: sampler.Params{Temperature: 0}})
			}
			wide, narrow := eng(64), eng(16)
			run := func(e *rollout.Engine) int {
				st, err := e.Generate(context.Background(), prompts, func([]dataset.Rollout) error { return nil })
				if err != nil || len(st.Errors) > 0 {
					b.Fatal(err, st.Errors)
				}
				return st.Tokens
			}
			var rw, rn float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					rw = max(rw, rate(func() int { return run(wide) }))
					rn = max(rn, rate(func() int { return run(narrow) }))
				} else {
					rn = max(rn, rate(func() int { return run(narrow) }))
					rw = max(rw, rate(func() int { return run(wide) }))
				}
			}
			b.ReportMetric(rw, "64-seq_tok/s")
			b.ReportMetric(rn, "16-seq_tok/s")
			b.ReportMetric(rw/rn, "64/16")
			fmt.Printf("\nmany sequences (%s, 128 prompts x 32 greedy tokens, %d threads): 64 at a time %.0f tokens/s, 16 at a time %.0f tokens/s, 64/16 = %.2f\n",
				bm.name, wide.Options().Threads, rw, rn, rw/rn)
		})
	}
}
