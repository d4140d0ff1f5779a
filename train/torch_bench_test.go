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
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

// torchAnchor is one PyTorch to compare with: an interpreter that imports
// torch, and the environment its runs get.
type torchAnchor struct {
	name   string
	python string
	env    []string
	blas   string // what its BLAS report said, for the table
}

// torchAnchors are the PyTorch builds BenchmarkAgainstPyTorch compares with,
// where present: Debian's python3-torch (1.13, its products through
// libblas.so.3: OpenBLAS with libopenblas0-openmp, else netlib's reference
// BLAS, which is refused) and the package index's current torch with its
// own MKL and oneDNN, in build/trl-venv (make bench-trl lays it down).
var torchAnchors = []torchAnchor{
	{name: "Debian's PyTorch", python: "/usr/bin/python3"},
	{name: "PyTorch from the package index", python: filepath.Join("..", "build", "trl-venv", "bin", "python")},
}

// torchScript is the reference: a plain torch.nn llama with the model's
// shapes and LoRA on its seven matrices.
var torchScript = filepath.Join("..", "scripts", "torch_reference.py")

// blasReport is torch_reference.py --what blas's line.
type blasReport struct {
	Torch     string   `json:"torch"`
	BLASInfo  string   `json:"blas_info"`
	Libraries []string `json:"libraries"`
	Core      string   `json:"openblas_core"`
	Reference bool     `json:"reference_blas"`
	CPU       string   `json:"cpu_capability"`
	GFLOPS    float64  `json:"gflops_768"`
}

func (r blasReport) String() string {
	what := r.BLASInfo
	if r.Core != "" {
		what = "OpenBLAS, " + r.Core + " kernels"
	}
	if r.CPU != "" {
		what += ", CPU capability " + r.CPU
	}
	return fmt.Sprintf("torch %s, BLAS %s: %.0f GFLOP/s on a 768^3 F32 product", r.Torch, what, r.GFLOPS)
}

// cpuFlag reports whether /proc/cpuinfo lists the flag.
func cpuFlag(flag string) bool { return slices.Contains(strings.Fields(cpuinfo("flags")), flag) }

// readBLAS runs the reference script's BLAS report under env.
func readBLAS(python string, env []string, threads int) (blasReport, error) {
	cmd := exec.Command(python, torchScript, "--what", "blas", "--threads", strconv.Itoa(threads),
		"--vocab", "8", "--embd", "8", "--layers", "1", "--heads", "1", "--heads-kv", "1", "--ff", "8")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var r blasReport
	if err != nil {
		return r, fmt.Errorf("%s: %v: %s", python, err, bytes.TrimSpace(out))
	}
	line, _, _ := bytes.Cut(out, []byte("\n"))
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("%s printed %q: %v", torchScript, line, err)
	}
	return r, nil
}

// prepareAnchor checks that an anchor runs at its best: a reference BLAS is
// refused, and for OpenBLAS the core types this CPU can run are each timed
// (OPENBLAS_CORETYPE; its own choice first) and the fastest is kept: Debian's
// OpenBLAS 0.3.21 falls back to generic kernels on CPUs newer than it.
func prepareAnchor(a torchAnchor) (torchAnchor, error) {
	if _, err := os.Stat(a.python); err != nil {
		return a, fmt.Errorf("%s is absent", a.python)
	}
	r, err := readBLAS(a.python, nil, 1)
	if err != nil {
		return a, err
	}
	if r.Reference {
		return a, fmt.Errorf("torch %s runs on the reference BLAS (%v, %.1f GFLOP/s): install libopenblas0-openmp", r.Torch, r.Libraries, r.GFLOPS)
	}
	best := r
	if r.Core != "" {
		cores := []string{"Haswell", "Zen"}
		if cpuFlag("avx512f") {
			cores = append(cores, "SkylakeX", "Cooperlake", "SapphireRapids")
		}
		for _, c := range cores {
			env := []string{"OPENBLAS_CORETYPE=" + c}
			rc, err := readBLAS(a.python, env, 1)
			if err != nil || !strings.EqualFold(rc.Core, c) {
				continue // this OpenBLAS does not know the core
			}
			if rc.GFLOPS > best.GFLOPS {
				best, a.env = rc, env
			}
		}
	}
	a.blas = best.String()
	if len(a.env) > 0 {
		a.blas += " (" + strings.Join(a.env, " ") + "; its own choice, " + r.Core + ", ran " + fmt.Sprintf("%.0f", r.GFLOPS) + ")"
	}
	return a, nil
}

// sideRates are one side's best tokens/s at one thread count.
type sideRates struct {
	forward, train1, train8, generate float64
}

// at is the k-th rate: forward, train1, train8, generate.
func (r *sideRates) at(k int) float64 {
	return [...]float64{r.forward, r.train1, r.train8, r.generate}[k]
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
// threads. PyTorch's side is scripts/torch_reference.py, run by each
// anchor of torchAnchors that is present (Debian's python3-torch with
// libopenblas0-openmp; the package index's torch in build/trl-venv), each
// first checked to run at its best (prepareAnchor: which BLAS, which
// kernels, GFLOP/s; a reference BLAS is refused); without any the benchmark
// prints NOT RUN. The sides alternate, two rounds, each keeping its best
// rate.
func BenchmarkAgainstPyTorch(b *testing.B) {
	var anchors []torchAnchor
	for _, a := range torchAnchors {
		ready, err := prepareAnchor(a)
		if err != nil {
			fmt.Printf("\nPyTorch comparison, %s: NOT RUN (%v)\n", a.name, err)
			continue
		}
		fmt.Printf("\nPyTorch comparison, %s: %s\n", ready.name, ready.blas)
		anchors = append(anchors, ready)
	}
	if len(anchors) == 0 {
		b.Skip("NOT RUN: no PyTorch to compare with (Debian's python3-torch with libopenblas0-openmp, or make bench-trl's build/trl-venv)")
	}
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
	torch := make([]map[int]*sideRates, len(anchors))
	for i := range anchors {
		torch[i] = map[int]*sideRates{}
		for _, t := range threads {
			torch[i][t] = &sideRates{}
		}
	}
	for _, t := range threads {
		ours[t] = &sideRates{}
	}
	b.ResetTimer()
	for round := range 2 {
		for _, t := range threads {
			// alternate which side goes first: the machine's load drifts
			runOurs := func() { ours[t].keepBest(oursRates(b, m, t)) }
			runTorch := func() {
				for i, a := range anchors {
					r, err := torchRates(a, spec, m.NVocab(), t)
					if err != nil {
						b.Fatal(err)
					}
					torch[i][t].keepBest(r)
				}
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
	fmt.Fprintf(&out, "bench-100m shapes, F32, LoRA rank 8 on 7 matrices; tokens/s, best of 2 alternating rounds; load average at the end %s.\n\n", testutil.LoadAverage())
	for i, a := range anchors {
		fmt.Fprintf(&out, "- PyTorch %c: %s, %s.\n", 'A'+i, a.name, a.blas)
	}
	header, rule := "| threads | work | confclip |", "|---:|---|---:|"
	for i := range anchors {
		header += fmt.Sprintf(" PyTorch %c | confclip/%c |", 'A'+i, 'A'+i)
		rule += "---:|---:|"
	}
	fmt.Fprintf(&out, "\n%s\n%s\n", header, rule)
	for _, t := range threads {
		o := ours[t]
		for k, name := range []string{"forward (teacher forcing, 16 x 64)", "training step, 1 sequence a pass",
			"training step, 8 sequences a pass", "generation, G=8 x 128 sampled"} {
			short := [...]string{"forward", "train1", "train8", "generate"}[k]
			row := fmt.Sprintf("| %d | %s | %.0f |", t, name, o.at(k))
			for i := range anchors {
				p := torch[i][t].at(k)
				row += fmt.Sprintf(" %.0f | %.2f |", p, o.at(k)/p)
				b.ReportMetric(o.at(k)/p, fmt.Sprintf("ratio-%c-%dt-%s", 'A'+i, t, short))
			}
			fmt.Fprintln(&out, row)
		}
	}
	fmt.Printf("\nconfclip against PyTorch on this CPU:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := testutil.RewriteMarked(*speedMD, "pytorch table", out.String()); err != nil {
			b.Fatal(err)
		}
	}
}

// torchRates runs the reference script once at the given threads.
func torchRates(a torchAnchor, spec modelgen.Spec, vocab, threads int) (sideRates, error) {
	cmd := exec.Command(a.python, torchScript, "--vocab", strconv.Itoa(vocab), "--embd", strconv.Itoa(spec.Embd),
		"--layers", strconv.Itoa(spec.Layers), "--heads", strconv.Itoa(spec.Heads), "--heads-kv", strconv.Itoa(spec.HeadsKV),
		"--ff", strconv.Itoa(spec.FF), "--threads", strconv.Itoa(threads), "--reps", "2")
	// OpenBLAS and OpenMP take their threads from torch.set_num_threads
	cmd.Env = append(append(os.Environ(), a.env...), "OMP_NUM_THREADS="+strconv.Itoa(threads), "OPENBLAS_NUM_THREADS="+strconv.Itoa(threads),
		"MKL_NUM_THREADS="+strconv.Itoa(threads))
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
	a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
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
		cfg.MicroBatch, cfg.Threads = mb, threads
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
		Threads: threads, Params: sampler.Params{Temperature: 1}})
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
