package rollout_test

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

var storiesPrompts = []dataset.Prompt{
	{ID: "s1", Prompt: "Once upon a time"},
	{ID: "s2", Prompt: "Tom and his dog went to the park. They"},
	{ID: "s3", Prompt: "The little bird was sad because"},
}

// TestGPUGreedyRolloutsMatchCPU: greedy rollouts with every layer on the
// device are token-identical to the CPU's, on the tiny model and on
// stories260K, and their log-probs agree within a bound (measured values in
// docs/gpu.md).
func TestGPUGreedyRolloutsMatchCPU(t *testing.T) {
	gpu := testutil.GPU(t)
	cases := []struct {
		name    string
		path    func(t *testing.T) string
		prompts []dataset.Prompt
		o       rollout.Options
	}{
		{"tiny", func(*testing.T) string { return tinyPath }, tinyPrompts,
			rollout.Options{Group: 2, MaxTokens: 24, Parallel: 6}},
		{"stories260K", func(t *testing.T) string { return filepath.Join(sharedModels(t), "stories260K.gguf") }, storiesPrompts,
			rollout.Options{Group: 2, MaxTokens: 64, Parallel: 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			var recs [2][]dataset.Rollout
			for i, p := range []llama.ModelParams{{}, {GPULayers: -1, Device: gpu.Name}} {
				m, err := llama.LoadModel(path, p)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				o := tc.o
				o.Params = sampler.Params{Temperature: 0}
				recs[i], _ = generate(t, newEngine(t, m, o), tc.prompts)
			}
			if len(recs[0]) != len(recs[1]) {
				t.Fatalf("CPU %d records, %s %d", len(recs[0]), gpu.Name, len(recs[1]))
			}
			dlp, tokens, differ := 0.0, 0, 0
			for k, c := range recs[0] {
				g := recs[1][k]
				if !equalInts(c.Tokens, g.Tokens) {
					t.Logf("%s/%d: CPU tokens %v, %s %v", c.PromptID, c.Sample, c.Tokens, gpu.Name, g.Tokens)
					differ++
					continue
				}
				for j := range c.Logprobs {
					dlp = math.Max(dlp, math.Abs(c.Logprobs[j]-g.Logprobs[j]))
				}
				tokens += len(c.Tokens)
			}
			testutil.Bound(t, gpu, fmt.Sprintf("the number of %d greedy rollouts not token-identical to the CPU's", len(recs[0])), float64(differ), 0)
			t.Logf("%s on %s: %d greedy tokens identical to the CPU's, max |Δ log p| %.3g", tc.name, gpu.Name, tokens, dlp)
			// lavapipe: 4.4e-3 (tiny) and 2.7e-3 (stories260K) with Vulkan's
			// F16 products, 1.9e-6 and 5.2e-6 without
			testutil.Bound(t, gpu, tc.name+" greedy rollouts' max |Δ log p| against the CPU", dlp, testutil.PrecisionBound(gpu, 1e-4, 1e-2))
		})
	}
}

// TestGPURolloutLogprobsMatchTeacherForcing is docs/rollout.md's fidelity
// claim on the device: sampled rollouts, then the same tokens teacher-forced,
// both with every layer on the device, to 1e-4 where the device computes in
// F32 (to F16's precision where it does not: testutil.PrecisionBound).
func TestGPURolloutLogprobsMatchTeacherForcing(t *testing.T) {
	gpu := testutil.GPU(t)
	for _, tc := range []struct {
		name    string
		path    func(t *testing.T) string
		prompts []dataset.Prompt
		o       rollout.Options
	}{
		{"tiny", func(*testing.T) string { return tinyPath }, tinyPrompts,
			rollout.Options{Group: 4, MaxTokens: 24, Parallel: 6, Seed: 3}},
		{"stories260K", func(t *testing.T) string { return filepath.Join(sharedModels(t), "stories260K.gguf") }, storiesPrompts,
			rollout.Options{Group: 4, MaxTokens: 32, Parallel: 6, Seed: 11}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := llama.LoadModel(tc.path(t), llama.ModelParams{GPULayers: -1, Device: gpu.Name})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			o := tc.o
			o.Params = sampler.Params{Temperature: 1}
			e := newEngine(t, m, o)
			recs, st := generate(t, e, tc.prompts)
			dlp, dent := forceCopies(t, e, recs)
			t.Logf("%s on %s: max |rollout - teacher-forced| log-prob %.3g, entropy %.3g over %d tokens", tc.name, gpu.Name, dlp, dent, st.Tokens)
			// docs/rollout.md's 1e-4 where the device computes in F32: lavapipe
			// measured 2.3e-6 (tiny) and 8.2e-6 (stories260K) with
			// GGML_VK_DISABLE_F16=1. With F16, Vulkan's default, batched and
			// one-token products round differently: 5.9e-3 and 1.8e-2.
			testutil.Bound(t, gpu, tc.name+" max |rollout - teacher-forced| log-prob", dlp, testutil.PrecisionBound(gpu, 1e-4, 5e-2))
		})
	}
}

// BenchmarkGPURollout times greedy rollouts (G=8 on one prompt) with every
// layer on the first GPU against the same on the CPU, in one run, and reports
// both rates and GPU/CPU. scripts/gpu-check.sh runs it.
func BenchmarkGPURollout(b *testing.B) {
	gpu := testutil.GPU(b)
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			var engines [2]*rollout.Engine
			for i, p := range []llama.ModelParams{{}, {GPULayers: -1, Device: gpu.Name}} {
				m, err := llama.LoadModel(bm.path, p)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { m.Close() })
				engines[i] = newEngine(b, m, rollout.Options{Group: 8, MaxTokens: 64, Parallel: 8, NCtx: 8 * 128,
					Threads: runtime.NumCPU(), Params: sampler.Params{Temperature: 0}})
				timeGenerate(b, engines[i], bm.prompt) // warm up
			}
			var rc, rg float64
			b.ResetTimer()
			for range b.N {
				rc = max(rc, rate(func() int { return timeGenerate(b, engines[0], bm.prompt) }))
				rg = max(rg, rate(func() int { return timeGenerate(b, engines[1], bm.prompt) }))
			}
			b.ReportMetric(rc, "cpu_tok/s")
			b.ReportMetric(rg, "gpu_tok/s")
			b.ReportMetric(rg/rc, "gpu/cpu")
			fmt.Printf("rollout %s: CPU %.0f tokens/s, %s %.0f tokens/s, GPU/CPU %.2fx\n", bm.name, rc, gpu.Name, rg, rg/rc)
		})
	}
}
