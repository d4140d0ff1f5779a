package train

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/peakrss"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/testkit/testutil"
)

// BenchmarkShapeTable's settings (make bench-shapes; docs/speed.md's "A
// real model's shape").
var (
	shapeNames    = flag.String("shapes", "qwen2.5-0.5b,llama-3.2-1b,qwen2.5-1.5b", "BenchmarkShapeTable: gen-model --shape names, comma-separated")
	shapeTypes    = flag.String("shape-types", "q4_k_m,q8_0", "BenchmarkShapeTable: weight types, comma-separated")
	shapeThreads  = flag.String("shape-threads", "1,2", "BenchmarkShapeTable: thread counts, comma-separated")
	shapePrompts  = flag.Int("shape-prompts", 2, "BenchmarkShapeTable: prompts per step, each with G = 8 completions")
	shapeMarker   = flag.String("shape-marker", "shape table", "BenchmarkShapeTable: the -speed-md file's markers to write the table between (<!-- NAME --> ... <!-- end NAME -->)")
	shapeProfile  = flag.Bool("shape-profile", false, "BenchmarkShapeTable: print each training step's time by ggml op")
	shapeUnshared = flag.Bool("shape-unshared", false, "BenchmarkShapeTable: train with every sequence's prompt its own (train.Config.UnsharedPrompts), as before patch 0057")
	shapeQBack    = flag.Bool("shape-quantized-backward", false, "BenchmarkShapeTable: train with the backward product through the quantized weights in Q8_0 (train.Config.QuantizedBackward, patch 0060)")
	sharedRounds  = flag.Int("shared-rounds", 2, "BenchmarkSharedPrompts and BenchmarkQuantizedBackward: rounds of the step each way, in turn")
	fmaPerCycle   = flag.Float64("fma-flops-per-cycle", 32, "BenchmarkShapeTable: where scripts/fmapeak.c cannot be built, the F32 FLOPs a core's FMA units retire per cycle (32: two 256-bit FMAs)")
)

// shapeGroup is G, the completions per prompt.
const shapeGroup = 8

// shapeParallel is the rollout's sequences in flight: the engine's default
// (rollout.Options.Parallel 0: max(G, 16)), both groups of the default two
// prompts at once, as `confclip run` samples a step's prompts.
const shapeParallel = 16

// shapeRow is one (shape, weight type, threads) row of the table.
type shapeRow struct {
	shape, typ          string
	threads             int
	params, weightBytes int64
	rollout, forced     float64 // tokens/s: sampled completion tokens; prompt + completion tokens
	train               float64 // tokens/s, prompt + completion tokens through forward and backward
	computed            float64 // of those tokens, the share computed (the rest shared prompts)
	trainS              float64 // the step's seconds
	microBatch, passes  int
	budget              int64
	rssRollout, rssTF   int64
	rssTrain            int64
	attnFLOPs           float64 // attention FLOPs per token at the records' mean context (forward)
}

// BenchmarkShapeTable is docs/speed.md's real-shape table: for each shape
// (gen-model --shape: a real model's exact layout with random weights),
// weight type and thread count, the stages of an RL step on records of
// varied length (prompts of 20-300 tokens, completions of 10-512, drawn
// once with a fixed seed, -shape-prompts prompts x G = 8):
//
//   - rollout: the prompts' groups sampled (G = 8, the engine's default
//     shapeParallel sequences in flight, 128 tokens,
//     temperature 1, log-probs), completion tokens/s;
//   - teacher forcing of the records (inference layout), tokens/s;
//   - one LoRA training step (rank 8, the default micro-batch from the
//     default memory budget) on the records, tokens/s and seconds;
//   - each stage's peak RSS (the process's peak reset before it, the
//     model loaded inside it).
//
// Beside them, the limits, both measured in the same run: FLOPs per token
// times tokens/s against the cores' F32 FMA peak (fmaPeak), and for
// decoding, the weight bytes each token reads (the weights once per 16
// tokens) times tokens/s against the memory bandwidth. A step of 16 prompts x 8 x 256 tokens (the
// issue's goal) is projected from the rates. The models are written to
// build/models once (an F32 file, then the quantized copy; about 4 bytes a
// parameter on disk while quantizing).
func BenchmarkShapeTable(b *testing.B) {
	var rows []shapeRow
	for _, name := range splitList(*shapeNames) {
		for _, q := range splitList(*shapeTypes) {
			path := shapeModel(b, name, q)
			for _, ts := range splitList(*shapeThreads) {
				threads, err := strconv.Atoi(ts)
				if err != nil || threads < 1 {
					b.Fatalf("-shape-threads: %q is not a thread count", ts)
				}
				b.Run(fmt.Sprintf("%s/%s/%dt", name, q, threads), func(b *testing.B) {
					r := shapeStages(b, path, threads)
					r.shape, r.typ = name, strings.ToUpper(q)
					b.ReportMetric(r.rollout, "rollout_tok/s")
					b.ReportMetric(r.train, "train_tok/s")
					b.ReportMetric(r.train/r.rollout, "train/rollout")
					rows = append(rows, r)
					fmt.Printf("shape table row: %s\n", shapeLine(r))
				})
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	var out bytes.Buffer
	mhz := cpuMHz()
	fmt.Fprintf(&out, "%s (%s, %.0f MHz, %d cores; load average at the end %s). %d prompts x G = %d, prompts %s tokens, completions %s; rollouts of 128 tokens, %d sequences in flight.\n\n",
		cpuModel(), runtime.GOARCH, mhz, runtime.NumCPU(), testutil.LoadAverage(), *shapePrompts, shapeGroup,
		spanOf(shapeLengths().prompts), spanOf(shapeLengths().completions), shapeParallel)
	fmt.Fprintln(&out, "| shape | weights | threads | rollout tok/s (G = 8): of FMA peak, of bandwidth | teacher forcing tok/s: of FMA peak | training tok/s: of FMA peak | training / rollout | micro-batch (passes; tokens computed, the rest shared prompts) | 16 x 8 x 256 step (projected) | peak RSS: rollout / forcing / training (budget) | weights |")
	fmt.Fprintln(&out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	bw, peak := map[int]float64{}, map[int]float64{}
	peakHow := ""
	for _, r := range rows {
		if _, ok := bw[r.threads]; !ok {
			bw[r.threads] = memoryBandwidth(r.threads)
			peak[r.threads], peakHow = fmaPeak(b, r.threads, mhz)
		}
		fmt.Fprintln(&out, shapeTableRow(r, peak[r.threads], bw[r.threads]))
	}
	fmt.Fprintf(&out, "\nMeasured here: memory bandwidth (a copy, read + write) %s; the FMA peak (%s) %s.\n", perThreads(bw, 1e9, "GB/s"), peakHow, perThreads(peak, 1e9, "GFLOP/s"))
	fmt.Printf("\nShape table:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := testutil.RewriteMarked(*speedMD, *shapeMarker, out.String()); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("wrote the table into %s\n", *speedMD)
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// shapeModel is shape name in weight type q, in build/models.
func shapeModel(b *testing.B, name, q string) string {
	spec, err := modelgen.Shape(name)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join("..", "build", "models")
	q = strings.ToLower(q)
	p := filepath.Join(dir, "shape-"+name+"-"+q+".gguf")
	if fileExists(p) {
		return p
	}
	f32 := filepath.Join(dir, "shape-"+name+".gguf")
	if err := modelgen.Cached(f32, spec); err != nil {
		b.Fatal(err)
	}
	if q == "f32" {
		return f32
	}
	if err := llama.Quantize(f32, p+".tmp", q, 0); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		b.Fatal(err)
	}
	return p
}

type lengths struct{ prompts, completions []int }

// shapeLengths draws the step's lengths once: each prompt 20-300 tokens,
// each completion 10-512.
func shapeLengths() lengths {
	rng := rand.New(rand.NewPCG(38, 1))
	var l lengths
	for range *shapePrompts {
		l.prompts = append(l.prompts, 20+rng.IntN(281))
		for range shapeGroup {
			l.completions = append(l.completions, 10+rng.IntN(503))
		}
	}
	return l
}

func spanOf(xs []int) string {
	lo, hi, sum := xs[0], xs[0], 0
	for _, x := range xs {
		lo, hi, sum = min(lo, x), max(hi, x), sum+x
	}
	return fmt.Sprintf("%d-%d (mean %d)", lo, hi, sum/len(xs))
}

// shapeRecords are the step's records: random tokens of shapeLengths,
// each group sharing its prompt, advantages of both signs.
func shapeRecords(nv int) ([]Example, []*dataset.Rollout) {
	l := shapeLengths()
	rng := rand.New(rand.NewPCG(38, 2))
	tok := func() llama.Token { return llama.Token(3 + rng.IntN(nv-3)) }
	var exs []Example
	var recs []*dataset.Rollout
	for i, pl := range l.prompts {
		p := make([]llama.Token, pl)
		p[0] = 1
		for j := 1; j < pl; j++ {
			p[j] = tok()
		}
		for k := range shapeGroup {
			c := make([]llama.Token, l.completions[i*shapeGroup+k])
			for j := range c {
				c[j] = tok()
			}
			exs = append(exs, Example{Prompt: p, Completion: c, Advantage: rng.Float64() - 0.5})
			recs = append(recs, &dataset.Rollout{PromptID: fmt.Sprint(i), PromptTokens: p, Tokens: c})
		}
	}
	return exs, recs
}

// stage runs f with the process's peak memory reset first, and returns
// the peak during f.
func stage(b *testing.B, f func()) int64 {
	runtime.GC()
	if err := peakrss.Reset(); err != nil {
		b.Logf("peak memory not reset (%v): the stage's peak includes the ones before", err)
	}
	f()
	return peakrss.Bytes()
}

// shapeStages measures one row: the three stages, each loading the model.
func shapeStages(b *testing.B, path string, threads int) shapeRow {
	r := shapeRow{threads: threads}
	l := shapeLengths()
	r.rssRollout = stage(b, func() {
		m, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		info := m.Info()
		r.params, r.weightBytes = int64(info.Params), int64(info.SizeBytes)
		r.attnFLOPs = attentionFLOPs(m, l)
		var prompts []dataset.Prompt
		longest := 0
		for i, pl := range l.prompts {
			text := promptOfLength(b, m, pl)
			prompts = append(prompts, dataset.Prompt{ID: fmt.Sprint(i), Prompt: text})
			longest = max(longest, pl)
		}
		const gen = 128
		e, err := rollout.NewEngine(m, rollout.Options{Group: shapeGroup, MaxTokens: gen,
			NCtx: shapeParallel * (longest + gen + 16), Seed: 1, Threads: threads, Params: sampler.Params{Temperature: 1}})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		st, err := e.Generate(context.Background(), prompts, func([]dataset.Rollout) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		r.rollout = float64(st.Tokens) / st.Elapsed.Seconds()
	})
	r.rssTF = stage(b, func() {
		m, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		_, recs := shapeRecords(m.NVocab())
		longest, all := 0, 0
		for _, x := range recs {
			longest = max(longest, len(x.PromptTokens)+len(x.Tokens))
			all += len(x.PromptTokens) + len(x.Tokens)
		}
		e, err := rollout.NewEngine(m, rollout.Options{Group: 1, MaxTokens: 1, Parallel: shapeGroup, NCtx: shapeGroup * (longest + 16),
			NBatch: 512, Threads: threads})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		t0 := time.Now()
		forceAll(b, e, recs)
		r.forced = float64(all) / time.Since(t0).Seconds()
	})
	r.rssTrain = stage(b, func() {
		m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: true})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
		exs, _ := shapeRecords(m.NVocab())
		cfg := DefaultConfig()
		cfg.Threads, cfg.Profile, cfg.UnsharedPrompts, cfg.QuantizedBackward = threads, *shapeProfile, *shapeUnshared, *shapeQBack
		tr, err := NewLoRATrainer(m, a, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		r.microBatch, r.budget = tr.cfg.MicroBatch, tr.budget
		t0 := time.Now()
		st, err := tr.Step(context.Background(), exs)
		if err != nil {
			b.Fatal(err)
		}
		r.trainS = time.Since(t0).Seconds()
		r.train = float64(st.AllTokens) / r.trainS
		r.passes = st.MicroBatches
		r.computed = float64(st.AllTokens-st.SharedTokens) / float64(st.AllTokens)
		if *shapeProfile {
			if err := llama.WriteProfile(os.Stdout, tr.Profile()); err != nil {
				b.Fatal(err)
			}
		}
	})
	return r
}

// promptOfLength is a text that tokenizes to n tokens (BOS included).
func promptOfLength(b *testing.B, m *llama.Model, n int) string {
	words := []string{"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	var sb strings.Builder
	for i := 0; ; i++ {
		toks, err := m.Tokenize(sb.String(), true, false)
		if err != nil {
			b.Fatal(err)
		}
		if len(toks) >= n {
			return sb.String()
		}
		sb.WriteString(words[i%len(words)] + " ")
	}
}

// attentionFLOPs is the forward's attention per token at the records'
// mean context: QK^T and AV, 2 FLOPs a multiply-add, over every head,
// against half the mean sequence on average (causal).
func attentionFLOPs(m *llama.Model, l lengths) float64 {
	info := m.Info()
	headDim := info.Embd / max(info.Heads, 1)
	if s := m.Meta(info.Architecture + ".attention.key_length"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			headDim = n
		}
	}
	seq := 0
	for i, pl := range l.prompts {
		for k := range shapeGroup {
			seq += pl + l.completions[i*shapeGroup+k]
		}
	}
	mean := float64(seq) / float64(len(l.completions))
	return 2 * 2 * float64(info.Layers*info.Heads*headDim) * mean / 2
}

// shapeTableRow is the row in docs/speed.md's table. A forward costs, a
// token, 2 FLOPs a weight (every weight multiplies once; the tied
// embedding once, as the output layer) plus attention; training with a
// frozen base twice the weights' (the backward product into the
// activations; the LoRA's own gradients are small) and attention three
// times. A decoded token reads the weights once per shapeParallel tokens.
func shapeTableRow(r shapeRow, peak, bw float64) string {
	fwd := 2*float64(r.params) + r.attnFLOPs
	trainFLOPs := 4*float64(r.params) + 3*r.attnFLOPs
	share := func(flops, rate float64) string { return fmt.Sprintf("%.0f%%", 100*flops*rate/peak) }
	decode := float64(r.weightBytes) / shapeParallel * r.rollout
	const steps = 16 * 8 * 256
	projected := steps/r.rollout + 16*8*(160+256)/r.train
	return fmt.Sprintf("| %s | %s | %d | %.1f: %s, %.0f%% | %.1f: %s | %.1f: %s | %.2f | %d (%d; %.0f%% computed) | %.0f min | %s / %s / %s (%s) | %s |",
		r.shape, r.typ, r.threads, r.rollout, share(fwd, r.rollout), 100*decode/bw, r.forced, share(fwd, r.forced),
		r.train, share(trainFLOPs, r.train*r.computed), r.train/r.rollout, r.microBatch, r.passes, 100*r.computed, projected/60,
		mib(r.rssRollout), mib(r.rssTF), mib(r.rssTrain), mib(r.budget), mib(r.weightBytes))
}

func shapeLine(r shapeRow) string {
	return fmt.Sprintf("%s %s %dt: rollout %.1f tok/s, forcing %.1f tok/s, training %.1f tok/s (%.0f s, micro-batch %d, %d passes, %.0f%% of the tokens computed), training/rollout %.2f, peak RSS %s / %s / %s",
		r.shape, r.typ, r.threads, r.rollout, r.forced, r.train, r.trainS, r.microBatch, r.passes, 100*r.computed, r.train/r.rollout,
		mib(r.rssRollout), mib(r.rssTF), mib(r.rssTrain))
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// memoryBandwidth is a copy's bytes read and written per second over 256
// MiB buffers, split over threads goroutines, the best of three.
func memoryBandwidth(threads int) float64 {
	const size = 256 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	best := 0.0
	for range 3 {
		t0 := time.Now()
		var wg sync.WaitGroup
		part := size / threads
		for k := range threads {
			wg.Go(func() { copy(dst[k*part:(k+1)*part], src[k*part:(k+1)*part]) })
		}
		wg.Wait()
		best = max(best, 2*size/time.Since(t0).Seconds())
	}
	return best
}

func perThreads(v map[int]float64, unit float64, name string) string {
	var parts []string
	for t := 1; t <= runtime.NumCPU()*4; t++ {
		if x, ok := v[t]; ok {
			parts = append(parts, fmt.Sprintf("%.1f %s on %d thread(s)", x/unit, name, t))
		}
	}
	return strings.Join(parts, ", ")
}

// fmaPeak is the F32 FLOPs per second the cores retire on threads threads:
// scripts/fmapeak.c (independent FMAs on registers, the widest vectors the
// CPU has) built with cc -march=native, the best of three runs; where it
// cannot be built, the clock times -fma-flops-per-cycle times threads.
func fmaPeak(b *testing.B, threads int, mhz float64) (float64, string) {
	exe := filepath.Join(b.TempDir(), "fmapeak")
	if out, err := exec.Command("cc", "-O2", "-march=native", "-pthread", filepath.Join("..", "scripts", "fmapeak.c"), "-o", exe).CombinedOutput(); err != nil {
		b.Logf("scripts/fmapeak.c not built (%v: %s): the FMA peak is assumed", err, out)
		return mhz * 1e6 * *fmaPerCycle * float64(threads), fmt.Sprintf("assumed: %.0f MHz x %.0f FLOP/cycle x threads", mhz, *fmaPerCycle)
	}
	best := 0.0
	for range 3 {
		out, err := exec.Command(exe, strconv.Itoa(threads)).Output()
		if err != nil {
			b.Fatalf("fmapeak: %v", err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		if err != nil {
			b.Fatalf("fmapeak printed %q", out)
		}
		best = max(best, v*1e9)
	}
	return best, "scripts/fmapeak.c: FMAs on registers, cc -march=native"
}

// cpuMHz and cpuModel read /proc/cpuinfo's first processor.
func cpuMHz() float64 {
	v, _ := strconv.ParseFloat(cpuinfo("cpu MHz"), 64)
	return v
}

func cpuModel() string { return cmp.Or(cpuinfo("model name"), runtime.GOARCH) }

func cpuinfo(key string) string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// BenchmarkSharedPrompts is what sharing a group's prompt in a pass (patch
// 0057) saves a training step at a real shape: one LoRA step on the shape
// table's records with and without sharing (train.Config.UnsharedPrompts),
// in turn (pairedSteps; make bench-shapes).
func BenchmarkSharedPrompts(b *testing.B) {
	p := pairedSteps(b, func(c *Config, shared bool) { c.UnsharedPrompts = !shared })
	s, u := p.stats[true], p.stats[false]
	fmt.Printf("shared prompts: %s (load average at the end %s): a training step %.1f tokens/s with the prompts shared (%d passes, %d of %d tokens computed), %.1f without (%d passes); ratio %.2f (best of %d rounds each, in turn)\n",
		p.what, testutil.LoadAverage(), p.best[true], s.MicroBatches, s.AllTokens-s.SharedTokens, s.AllTokens,
		p.best[false], u.MicroBatches, p.best[true]/p.best[false], *sharedRounds)
	b.ReportMetric(p.best[true]/p.best[false], "shared/unshared")
}

// BenchmarkQuantizedBackward is what the backward product through the
// quantized weights in Q8_0 integer dot products (patch 0060,
// train.quantized_backward) saves a training step at a real shape: one LoRA
// step on the shape table's records with it and with the F32 product, in
// turn (pairedSteps; make bench-shapes).
func BenchmarkQuantizedBackward(b *testing.B) {
	p := pairedSteps(b, func(c *Config, on bool) { c.QuantizedBackward = on })
	q, f := p.stats[true], p.stats[false]
	fmt.Printf("quantized backward: %s (load average at the end %s): a training step %.1f tokens/s with the backward product in Q8_0 (%d passes), %.1f in F32 (%d passes); ratio %.2f (best of %d rounds each, in turn)\n",
		p.what, testutil.LoadAverage(), p.best[true], q.MicroBatches, p.best[false], f.MicroBatches, p.best[true]/p.best[false], *sharedRounds)
	b.ReportMetric(p.best[true]/p.best[false], "q8_0/f32")
}

// paired is what pairedSteps measured: the best rate (all tokens a second)
// and that step's stats of each side, and the shape, type, threads and
// records in words.
type paired struct {
	what  string
	best  map[bool]float64
	stats map[bool]StepStats
}

// pairedSteps times one LoRA step on the shape table's records at the first
// of -shapes and -shape-types, on the last of -shape-threads, with set(cfg,
// true) and set(cfg, false) in turn for -shared-rounds rounds, each side's
// trainer new (its micro-batch sized anew).
func pairedSteps(b *testing.B, set func(*Config, bool)) paired {
	name, q := splitList(*shapeNames)[0], splitList(*shapeTypes)[0]
	ts := splitList(*shapeThreads)
	threads, err := strconv.Atoi(ts[len(ts)-1])
	if err != nil || threads < 1 {
		b.Fatalf("-shape-threads: %q is not a thread count", ts[len(ts)-1])
	}
	m, err := llama.LoadModel(shapeModel(b, name, q), llama.ModelParams{NoRepack: true})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
	exs, _ := shapeRecords(m.NVocab())
	p := paired{what: fmt.Sprintf("%s %s %dt, %d records", name, strings.ToUpper(q), threads, len(exs)),
		best: map[bool]float64{}, stats: map[bool]StepStats{}}
	for range *sharedRounds {
		for _, on := range []bool{true, false} {
			cfg := DefaultConfig()
			cfg.Threads = threads
			set(&cfg, on)
			tr, err := NewLoRATrainer(m, a, cfg)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			st, err := tr.Step(context.Background(), exs)
			rate := float64(st.AllTokens) / time.Since(t0).Seconds()
			tr.Close()
			if err != nil {
				b.Fatal(err)
			}
			if rate > p.best[on] {
				p.best[on], p.stats[on] = rate, st
			}
		}
	}
	return p
}
