package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

func loadOn(t testing.TB, p llama.ModelParams) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(tinyPath, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// relErr is ‖a − b‖ / ‖b‖ over every parameter's gradient.
func relErr(a, b [][]float32) float64 {
	var d, n float64
	for j := range b {
		for k := range b[j] {
			x := float64(a[j][k]) - float64(b[j][k])
			d += x * x
			n += float64(b[j][k]) * float64(b[j][k])
		}
	}
	return math.Sqrt(d / n)
}

// TestGPUGradientMatchesCPU: a training step's gradients with every layer
// on the device against the CPU's, for LoRA and for full-parameter
// training, for LoRA on sequences of one length (whose attention runs
// in streams, patch 0039) and for LoRA with the entropy term (patch 0056),
// to F32's precision (F16's where the device's matrix products
// round to F16: testutil.PrecisionBound). It also lists the training
// graph's ops that the scheduler ran on the CPU (docs/gpu.md quotes them).
func TestGPUGradientMatchesCPU(t *testing.T) {
	gpu := testutil.GPU(t)
	for _, kind := range []string{"lora", "full", "streams", "entropy"} {
		t.Run(kind, func(t *testing.T) {
			var grads [2][][]float32
			var losses [2]float64
			var lps [2][][]float32
			var paramNames []string
			for i, p := range []llama.ModelParams{{NoMmap: true}, {NoMmap: true, GPULayers: -1, Device: gpu.Name}} {
				run := func() {
					m := loadOn(t, p)
					var tr *Trainer
					var err error
					exs := examples(t, m)
					if kind == "streams" {
						// sequences of one length: attention in streams (patch 0039)
						exs = lengthExamples(m, 4, []int{12, 12, 12}, 1)
					}
					if kind != "full" {
						cfg := testConfig()
						if kind == "entropy" {
							cfg.EntropyCoef = 0.05
						}
						tr, err = NewLoRATrainer(m, newAdapter(t, m, true), cfg)
					} else {
						var ws []string
						if ws, err = F32Weights(tinyPath); err == nil {
							tr, err = NewFullTrainer(m, ws, testConfig())
						}
					}
					if err != nil {
						t.Fatal(err)
					}
					defer tr.Close()
					st, err := tr.Gradient(context.Background(), exs)
					if err != nil {
						t.Fatal(err)
					}
					losses[i] = st.Loss
					paramNames = paramNames[:0]
					for _, p := range tr.Params() {
						paramNames = append(paramNames, p.Name)
					}
					for _, g := range tr.Grads() {
						grads[i] = append(grads[i], append([]float32(nil), g...))
					}
					if lps[i], err = tr.LogProbs(exs); err != nil {
						t.Fatal(err)
					}
				}
				if i == 0 {
					run()
					continue
				}
				byBackend := testutil.SchedAssignments(t, run)
				var cpuOps []string
				for op, n := range byBackend["CPU"] {
					cpuOps = append(cpuOps, fmt.Sprintf("%s×%d", op, n))
				}
				sort.Strings(cpuOps)
				onDevice := 0
				for b, ops := range byBackend {
					if b != "CPU" {
						for _, n := range ops {
							onDevice += n
						}
					}
				}
				t.Logf("%s training graphs on %s: %d nodes on the device; on the CPU: %s", kind, gpu.Name, onDevice, strings.Join(cpuOps, " "))
				if onDevice == 0 {
					t.Fatalf("no node of the training graph ran on %s: %v", gpu.Name, byBackend)
				}
			}
			e := relErr(grads[1], grads[0])
			worst := ""
			for j := range grads[0] {
				if ej := relErr(grads[1][j:j+1], grads[0][j:j+1]); ej > 1e-2 {
					worst += fmt.Sprintf(" %s:%.2g", paramNames[j], ej)
				}
			}
			if worst != "" {
				t.Logf("%s: parameters with the largest gradient errors:%s", kind, worst)
			}
			dlp := 0.0
			for j := range lps[0] {
				for k := range lps[0][j] {
					dlp = math.Max(dlp, math.Abs(float64(lps[0][j][k]-lps[1][j][k])))
				}
			}
			t.Logf("%s on %s: gradient relative error %.3g, loss CPU %.6f device %.6f, max |Δ log p| %.3g", kind, gpu.Name, e, losses[0], losses[1], dlp)
			if math.IsNaN(e) {
				t.Fatalf("gradients on %s: relative error NaN", gpu.Name)
			}
			// lavapipe measured 1.0e-6 (LoRA) and 7.5e-7 (full) with
			// GGML_VK_DISABLE_F16=1, and 2.6e-3 and 1.1e-3 with F16, Vulkan's
			// default, where every product of F32 matrices rounds its inputs
			// to F16.
			testutil.Bound(t, gpu, kind+" gradient relative error against the CPU", e, testutil.PrecisionBound(gpu, 1e-4, 5e-3))
		})
	}
}

// TestGPUStepRaisesLogProb: on the device, a step with a positive advantage
// raises the completion's log-prob (TestStepDirection on the CPU).
func TestGPUStepRaisesLogProb(t *testing.T) {
	gpu := testutil.GPU(t)
	m := loadOn(t, llama.ModelParams{GPULayers: -1, Device: gpu.Name})
	tr, err := NewLoRATrainer(m, newAdapter(t, m, false), testConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	e := examples(t, m)[0]
	e.Advantage = 1
	before := meanLogProb(t, tr, e)
	for i := 0; i < 2; i++ {
		if _, err := tr.Step(context.Background(), []Example{e}); err != nil {
			t.Fatal(err)
		}
	}
	after := meanLogProb(t, tr, e)
	t.Logf("on %s, advantage +1: mean log-prob %.5f -> %.5f", gpu.Name, before, after)
	if after <= before {
		t.Fatalf("a positive advantage must raise the log-prob on %s: %g -> %g", gpu.Name, before, after)
	}
}

// BenchmarkGPUTrainStep times a LoRA training step (16 sequences of 64
// tokens, forward and backward, AdamW) with every layer on the first GPU
// against the same step on the CPU, in one run, and reports both rates and
// GPU/CPU. scripts/gpu-check.sh runs it.
func BenchmarkGPUTrainStep(b *testing.B) {
	gpu := testutil.GPU(b)
	models := []struct{ name, path string }{{"tiny", tinyPath}}
	bench := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(bench, modelgen.Bench()); err == nil {
		models = append(models, struct{ name, path string }{"bench-100m", bench})
	} else {
		b.Logf("NOT RUN on bench-100m: %v", err)
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			var trs [2]*Trainer
			var exs []Example
			for i, p := range []llama.ModelParams{{}, {GPULayers: -1, Device: gpu.Name}} {
				m, err := llama.LoadModel(mc.path, p)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { m.Close() })
				a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
				cfg := DefaultConfig()
				cfg.MicroBatch = 512
				cfg.Threads = runtime.NumCPU()
				if trs[i], err = NewLoRATrainer(m, a, cfg); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { trs[i].Close() })
				if exs == nil {
					rng := rand.New(rand.NewPCG(1, 2))
					for k := 0; k < 16; k++ {
						p, c := make([]llama.Token, 16), make([]llama.Token, 48)
						p[0] = 1
						for j := 1; j < len(p); j++ {
							p[j] = llama.Token(3 + rng.IntN(m.NVocab()-3))
						}
						for j := range c {
							c[j] = llama.Token(3 + rng.IntN(m.NVocab()-3))
						}
						exs = append(exs, Example{Prompt: p, Completion: c, Advantage: rng.Float64() - 0.5})
					}
				}
			}
			step := func(tr *Trainer) float64 {
				t0 := time.Now()
				if _, err := tr.Step(context.Background(), exs); err != nil {
					b.Fatal(err)
				}
				return float64(16*64) / time.Since(t0).Seconds()
			}
			step(trs[0]) // warm up
			step(trs[1])
			var rc, rg float64
			b.ResetTimer()
			for range b.N {
				rc = max(rc, step(trs[0]))
				rg = max(rg, step(trs[1]))
			}
			b.ReportMetric(rc, "cpu_tok/s")
			b.ReportMetric(rg, "gpu_tok/s")
			b.ReportMetric(rg/rc, "gpu/cpu")
			fmt.Printf("training step %s: CPU %.0f tokens/s, %s %.0f tokens/s, GPU/CPU %.2fx\n", mc.name, rc, gpu.Name, rg, rg/rc)
		})
	}
}
