package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/confclip/confclip/sampler"
)

// torchPython is the interpreter the PyTorch comparison runs: Debian's, where
// python3-torch installs torch.
const torchPython = "/usr/bin/python3"

// torchScript is the reference: a plain torch.nn llama with the model's
// shapes and LoRA on its seven matrices.
var torchScript = filepath.Join("..", "scripts", "torch_reference.py")

// sideRates are one side's best tokens/s at one thread count.
type sideRates struct {
	forward, train1, train8, generate float64
}

func (r *sideRates) keepBest(o sideRates) {
	r.forward, r.train1 = max(r.forward, o.forward), max(r.train1, o.train1)
	r.train8, r.generate = max(r.train8, o.train8), max(r.generate, o.generate)
}

// BenchmarkAgainstPyTorch compares confclip with PyTorch on the same CPU and
// the same work, bench-100m's shapes in F32: teacher forcing (16 sequences
// of 16 prompt + 48 completion tokens, log-probs at the completion
// positions), a LoRA policy-gradient step over them (rank 8 on all seven
// matrices; one sequence per pass and eight per pass, confclip's micro-batch
// 64 and 512 tokens) and G=8 sampled generation of 128 tokens, at 1 and 2
// threads. PyTorch's side is scripts/torch_reference.py, run by Debian's
// python3 (apt-get install python3-torch libopenblas0-openmp); without
// torch the benchmark prints NOT RUN. The sides alternate, two rounds, each
// keeping its best rate.
func BenchmarkAgainstPyTorch(b *testing.B) {
	ver, err := exec.Command(torchPython, "-c", "import torch; print(torch.__version__)").CombinedOutput()
	if err != nil {
		fmt.Printf("\nPyTorch comparison: NOT RUN (%s cannot import torch: install python3-torch and libopenblas0-openmp)\n\n", torchPython)
		b.Skipf("NOT RUN: %s cannot import torch: %s", torchPython, bytes.TrimSpace(ver))
	}
	torchVersion := "PyTorch " + string(bytes.TrimSpace(ver))
	bench := filepath.Join("..", modelgen.BenchPath)
	if err := modelgen.Cached(bench, modelgen.Bench()); err != nil {
		b.Skipf("NOT RUN: %v", err)
	}
	spec := modelgen.Bench()
	m, err := llama.LoadModel(bench, llama.ModelParams{NoRepack: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	threads := []int{1}
	if n := runtime.NumCPU(); n > 1 {
		threads = append(threads, 2)
	}
	ours := map[int]*sideRates{}
	torch := map[int]*sideRates{}
	for _, t := range threads {
		ours[t], torch[t] = &sideRates{}, &sideRates{}
	}
	b.ResetTimer()
	for round := range 2 {
		for _, t := range threads {
			// alternate which side goes first: the machine's load drifts
			runOurs := func() { ours[t].keepBest(oursRates(b, m, t)) }
			runTorch := func() {
				r, err := torchRates(spec, m.NVocab(), t)
				if err != nil {
					b.Fatal(err)
				}
				torch[t].keepBest(r)
			}
			if round%2 == 0 {
				runTorch()
				runOurs()
			} else {
				runOurs()
				runTorch()
			}
		}
	}
	b.StopTimer()
	var out bytes.Buffer
	fmt.Fprintf(&out, "bench-100m shapes, F32, LoRA rank 8 on 7 matrices; tokens/s, best of 2 alternating rounds; %s; load average at the end %s.\n\n", torchVersion, testutil.LoadAverage())
	fmt.Fprintln(&out, "| threads | work | PyTorch | confclip | confclip/PyTorch |")
	fmt.Fprintln(&out, "|---:|---|---:|---:|---:|")
	for _, t := range threads {
		o, p := ours[t], torch[t]
		for _, row := range []struct {
			name string
			p, o float64
		}{
			{"forward (teacher forcing, 16 x 64)", p.forward, o.forward},
			{"training step, 1 sequence a pass", p.train1, o.train1},
			{"training step, 8 sequences a pass", p.train8, o.train8},
			{"generation, G=8 x 128 sampled", p.generate, o.generate},
		} {
			fmt.Fprintf(&out, "| %d | %s | %.0f | %.0f | %.2f |\n", t, row.name, row.p, row.o, row.o/row.p)
			b.ReportMetric(row.o/row.p, fmt.Sprintf("ratio-%dt-%s", t, strings.Fields(row.name)[0]))
		}
	}
	fmt.Printf("\nconfclip against PyTorch on this CPU:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := rewriteSpeedTable(*speedMD, "pytorch table", out.String()); err != nil {
			b.Fatal(err)
		}
	}
}

// torchRates runs the reference script once at the given threads.
func torchRates(spec modelgen.Spec, vocab, threads int) (sideRates, error) {
	cmd := exec.Command(torchPython, torchScript, "--vocab", strconv.Itoa(vocab), "--embd", strconv.Itoa(spec.Embd),
		"--layers", strconv.Itoa(spec.Layers), "--heads", strconv.Itoa(spec.Heads), "--heads-kv", strconv.Itoa(spec.HeadsKV),
		"--ff", strconv.Itoa(spec.FF), "--threads", strconv.Itoa(threads), "--reps", "2")
	// OpenBLAS and OpenMP take their threads from torch.set_num_threads
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+strconv.Itoa(threads), "OPENBLAS_NUM_THREADS="+strconv.Itoa(threads))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return sideRates{}, fmt.Errorf("%s: %v: %s", torchScript, err, stderr.String())
	}
	var r sideRates
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var row struct {
			What    string  `json:"what"`
			Rate    float64 `json:"tokens_per_s"`
			PerPass int     `json:"per_pass"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			return sideRates{}, fmt.Errorf("%s printed %q: %v", torchScript, sc.Text(), err)
		}
		switch {
		case row.What == "forward":
			r.forward = row.Rate
		case row.What == "train" && row.PerPass == 1:
			r.train1 = row.Rate
		case row.What == "train" && row.PerPass == 8:
			r.train8 = row.Rate
		case row.What == "generate":
			r.generate = row.Rate
		}
	}
	return r, nil
}

// oursRates times confclip's side once at the given threads: teacher forcing
// through the rollout engine, training steps at micro-batches of one and
// eight sequences, and a sampled G=8 rollout, each the best of two.
func oursRates(b *testing.B, m *llama.Model, threads int) sideRates {
	a := loraAdapter(b, m, LoRAConfig{Rank: 8, Alpha: 16, Seed: 1}, false)
	defer a.Close()
	exs, recs := benchExamples(m.NVocab())
	tokens := float64(16 * 64)
	best := func(f func()) float64 {
		f() // warm up: the first evaluation of a context allocates its buffers
		r := 0.0
		for range 2 {
			t0 := time.Now()
			f()
			r = max(r, tokens/time.Since(t0).Seconds())
		}
		return r
	}
	var r sideRates
	eng, err := rollout.NewEngine(m, rollout.Options{Group: 1, MaxTokens: 1, Parallel: 16, NCtx: 16 * 64, NBatch: 512, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.SetAdapter(a, 1); err != nil {
		b.Fatal(err)
	}
	r.forward = best(func() { forceAll(b, eng, recs) })
	eng.Close()
	for _, mb := range []int{64, 512} {
		cfg := DefaultConfig()
		cfg.MicroBatchTokens, cfg.Threads = mb, threads
		tr, err := NewLoRATrainer(m, a, cfg)
		if err != nil {
			b.Fatal(err)
		}
		rate := best(func() {
			if _, err := tr.Step(context.Background(), exs); err != nil {
				b.Fatal(err)
			}
		})
		tr.Close()
		if mb == 64 {
			r.train1 = rate
		} else {
			r.train8 = rate
		}
	}
	const group, gen = 8, 128
	g, err := rollout.NewEngine(m, rollout.Options{Group: group, MaxTokens: gen, Parallel: group, NCtx: group * 160, Seed: 1,
		Threads: threads, Sampling: sampler.Params{Temperature: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	if err := g.SetAdapter(a, 1); err != nil {
		b.Fatal(err)
	}
	prompt := []dataset.Prompt{{ID: "bench", Prompt: "What is 12+7? Answer:"}}
	for i := range 3 {
		st, err := g.Generate(context.Background(), prompt, func([]dataset.Rollout) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 { // the first is the warm-up
			r.generate = max(r.generate, float64(st.Tokens)/st.Elapsed.Seconds())
		}
	}
	return r
}
