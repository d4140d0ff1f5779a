package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/testutil"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
)

// peakRSS is the process's peak resident memory (VmHWM) in MiB.
func peakRSS() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// BenchmarkTrainAgainstForward times a LoRA training step (forward and
// backward through llama_pg_eval, AdamW) against forward-only teacher forcing
// of the same sequences through the rollout engine, in one run, and reports
// the ratio and the peak memory.
func BenchmarkTrainAgainstForward(b *testing.B) {
	models := []struct{ name, path string }{{"tiny", tinyPath}}
	if p := filepath.Join(testutil.SharedDir(), "stories260K.gguf"); fileExists(p) {
		models = append(models, struct{ name, path string }{"stories260K", p})
	} else {
		b.Logf("NOT RUN on stories260K: %s is absent", p)
	}
	bench := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(bench, modelgen.Bench()); err == nil {
		models = append(models, struct{ name, path string }{"bench-100m", bench})
	} else {
		b.Logf("NOT RUN on bench-100m: %v", err)
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			m, err := llama.LoadModel(mc.path, llama.ModelParams{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			dir := b.TempDir()
			ap := filepath.Join(dir, "lora.gguf")
			if err := CreateLoRA(m, ap, LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}); err != nil {
				b.Fatal(err)
			}
			a, err := llama.LoadAdapter(m, ap)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			// 16 sequences of a 16-token prompt and a 48-token completion.
			rng := rand.New(rand.NewPCG(1, 2))
			nv := m.NVocab()
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
			cfg := DefaultConfig()
			cfg.MicroBatchTokens = 512
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
			tokens := 16 * 64
			var tTrain, tFwd time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := tr.Step(context.Background(), exs); err != nil {
					b.Fatal(err)
				}
				tTrain += time.Since(t0)
				for _, r := range recs {
					r.Logprobs, r.Entropies = nil, nil
				}
				t0 = time.Now()
				if err := eng.TeacherForce(context.Background(), recs); err != nil {
					b.Fatal(err)
				}
				tFwd += time.Since(t0)
			}
			train := float64(tokens*b.N) / tTrain.Seconds()
			fwd := float64(tokens*b.N) / tFwd.Seconds()
			b.ReportMetric(train, "train-tok/s")
			b.ReportMetric(fwd, "forward-tok/s")
			b.ReportMetric(fwd/train, "forward/train")
			b.ReportMetric(peakRSS(), "peak-MiB")
			fmt.Printf("%s: training %.0f tokens/s, forward-only teacher forcing %.0f tokens/s: a step costs %.2fx a forward pass; peak RSS %.0f MiB\n",
				mc.name, train, fwd, fwd/train, peakRSS())
		})
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
