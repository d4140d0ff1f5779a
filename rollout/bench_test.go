package rollout_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/testutil"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
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
			m := loadModel(b, bm.path)
			o := rollout.Options{Group: 8, MaxTokens: 32, Seed: 1, Threads: runtime.NumCPU(), NCtx: 8 * 128,
				Sampling: sampler.Params{Temperature: 1}}
			o.Parallel = 8
			batched := newEngine(b, m, o)
			o.Parallel, o.NCtx = 1, 128
			seq := newEngine(b, m, o)
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

// BenchmarkEngineVsReference times the engine's greedy generation (G=8 on
// one prompt, log-probs and entropies recorded) against a C loop making the
// same llama_decode calls with an argmax in C
// (llama.ReferenceBatchedGreedy), on contexts with the same settings, and
// reports both rates and engine/reference.
func BenchmarkEngineVsReference(b *testing.B) {
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			const group, maxTokens, nctx = 8, 32, 8 * 128
			m := loadModel(b, bm.path)
			e := newEngine(b, m, rollout.Options{Group: group, MaxTokens: maxTokens, Parallel: group, NCtx: nctx,
				Threads: runtime.NumCPU(), Sampling: sampler.Params{Temperature: 0}})
			o := e.Options()
			ref, err := llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: o.NBatch, NSeqMax: group,
				Threads: runtime.NumCPU(), FlashAttn: o.FlashAttn, TypeK: o.KVType, TypeV: o.KVType})
			if err != nil {
				b.Fatal(err)
			}
			defer ref.Close()
			prompt, err := m.Tokenize(bm.prompt, true, false)
			if err != nil {
				b.Fatal(err)
			}
			runRef := func() int {
				n, err := llama.ReferenceBatchedGreedy(ref, prompt, group, maxTokens)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
			if ne, nr := timeGenerate(b, e, bm.prompt), runRef(); ne != nr {
				b.Logf("engine generated %d tokens, reference %d", ne, nr)
			}
			var re, rr float64
			b.ResetTimer()
			for range b.N {
				re = max(re, rate(func() int { return timeGenerate(b, e, bm.prompt) }))
				rr = max(rr, rate(func() int { return runRef() }))
			}
			b.ReportMetric(re, "engine_tok/s")
			b.ReportMetric(rr, "reference_tok/s")
			b.ReportMetric(re/rr, "ratio")
		})
	}
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
					Threads: runtime.NumCPU(), Sampling: sampler.Params{Temperature: 1}})
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
