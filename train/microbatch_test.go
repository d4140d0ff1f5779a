package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// randomExamples are n sequences of a 16-token prompt and a 48-token
// completion of random tokens.
func randomExamples(m *llama.Model, n int, seed uint64) []Example {
	lengths := make([]int, n)
	for i := range lengths {
		lengths[i] = 64
	}
	return lengthExamples(m, 16, lengths, seed)
}

// lengthExamples are sequences of the given lengths in tokens, prompt
// tokens and then completion tokens, random.
func lengthExamples(m *llama.Model, prompt int, lengths []int, seed uint64) []Example {
	rng := rand.New(rand.NewPCG(seed, 2))
	tok := func() llama.Token { return llama.Token(3 + rng.IntN(m.NVocab()-3)) }
	var exs []Example
	for _, n := range lengths {
		e := Example{Prompt: make([]llama.Token, prompt), Completion: make([]llama.Token, n-prompt), Advantage: rng.Float64() - 0.5}
		for j := range e.Prompt {
			e.Prompt[j] = tok()
		}
		for j := range e.Completion {
			e.Completion[j] = tok()
		}
		exs = append(exs, e)
	}
	return exs
}

// TestActivationEstimate: PassBytes, which fills each pass of the default
// micro-batch, is above the compute buffer a LoRA training pass really
// allocates (llama_context_compute_buffer_size after the pass), and within
// 2.5x of it, on every generated architecture and stories260K, for 64 to
// 512 tokens in each attention layout (patch 0057): one n x n mask (one
// long sequence and short ones), streams (sequences of 64), gathered
// streams (48 and 80 in turn), and groups of 4 sharing a prompt of 32.
// ActivationBytes, the one-mask worst case, is above them all.
func TestActivationEstimate(t *testing.T) {
	paths := map[string]string{}
	for _, a := range modelgen.Archs {
		paths[a] = testutil.ArchModel(t, a)
	}
	if p := filepath.Join(testutil.SharedDir(), "stories260K.gguf"); fileExists(p) {
		paths["stories260K"] = p
	} else {
		t.Logf("NOT RUN on stories260K: %s is absent", p)
	}
	for name, p := range paths {
		m, err := llama.LoadModel(p, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		a := newAdapter(t, m, true)
		for _, n := range []int{64, 256, 512} {
			for _, layout := range []string{"one mask", "streams", "gathered", "shared", "entropy", "temperature"} {
				if n == 64 && layout != "one mask" || (layout == "entropy" || layout == "temperature") && n != 256 {
					continue // one sequence: one mask; the entropy term and a temperature at one size
				}
				var exs []Example
				switch layout {
				case "one mask", "entropy", "temperature": // n/64 sequences: one long, the rest of 20
					k := n / 64
					lengths := []int{n - 20*(k-1)}
					for range k - 1 {
						lengths = append(lengths, 20)
					}
					exs = lengthExamples(m, 16, lengths, 1)
				case "streams", "gathered": // n/64 sequences of 64, or of 48 and 80 in turn
					lengths := make([]int, n/64)
					for i := range lengths {
						lengths[i] = 64
						if layout == "gathered" {
							lengths[i] += 16 * (2*(i%2) - 1)
						}
					}
					exs = lengthExamples(m, 16, lengths, 1)
				case "shared": // n/128 groups of 4 x 23 tokens after a prompt of 32 (127 tokens a group)
					exs = groupExamples(m, slices.Repeat([]int{32}, n/128), 4, 0, 1)
					for i := range exs {
						exs[i].Completion = lengthExamples(m, 4, []int{27}, uint64(i))[0].Completion
					}
				}
				cfg := testConfig()
				cfg.MicroBatch = n
				switch layout {
				case "entropy":
					cfg.EntropyCoef = 0.01
				case "temperature":
					cfg.Temperature = 0.5
				}
				tr, err := NewLoRATrainer(m, a, cfg)
				if err != nil {
					t.Fatal(err)
				}
				mbs, err := tr.microBatches(exs, make([]float64, len(exs)), nil, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				st, err := tr.Gradient(context.Background(), exs)
				got := tr.ComputeBufferBytes()
				tr.Close()
				if err != nil {
					t.Fatal(err)
				}
				if st.MicroBatches != 1 || len(mbs) != 1 {
					t.Fatalf("%s: %d micro-batches for %d tokens", name, st.MicroBatches, n)
				}
				shape := ModelShape(m)
				shape.Entropy = layout == "entropy"
				shape.Temperature = layout == "temperature"
				est := PassBytes(shape, mbs[0])
				worst := ActivationBytes(shape, n, st.Tokens)
				t.Logf("%s, %d tokens (%s): compute buffer %.2f MiB, estimate %.2f MiB (%.2fx), one-mask estimate %.2f MiB", name, n, layout,
					float64(got)/(1<<20), float64(est)/(1<<20), float64(est)/float64(got), float64(worst)/(1<<20))
				if got <= 0 || est < got || est > 5*got/2 || worst < got {
					t.Errorf("%s, %d tokens (%s): estimate %d bytes (one mask %d) against a compute buffer of %d", name, n, layout, est, worst, got)
				}
			}
		}
	}
}

// TestAutoMicroBatch: the default micro-batch is the largest whose estimate
// (the attention apart) fits the budget: the tiny model reaches the cap of 4096 tokens at
// 64 MiB, and a budget of 1 MiB stops it below; a trainer made
// without a micro-batch sizes it from train.memory when given, else from
// a quarter of the free RAM, and says so.
func TestAutoMicroBatch(t *testing.T) {
	m := load(t, false)
	s := ModelShape(m)
	for _, budget := range []int64{64 << 20, 1 << 20} {
		n := AutoMicroBatch(s, budget)
		lin := func(n int) int64 { return activationBytes(s, n, n, attention{}) }
		if lin(n) > budget || (n < MaxAutoMicroBatch && lin(n+1) <= budget) {
			t.Fatalf("budget %d: micro-batch %d, estimate %d, and %d for one more token", budget, n, lin(n), lin(n+1))
		}
		if want := budget == 64<<20; (n == MaxAutoMicroBatch) != want {
			t.Fatalf("budget %d: micro-batch %d for the tiny model; at the cap %d: want %v", budget, n, MaxAutoMicroBatch, want)
		}
	}

	avail, err := memAvailable()
	if err != nil {
		t.Fatal(err)
	}
	b := MemoryBudget(m, 0)
	// free memory moves while the test runs: within a tenth
	if want := MemoryShare * float64(avail); math.Abs(float64(b.Bytes)-want) > 0.1*want || !strings.Contains(b.Source, "free RAM") {
		t.Errorf("default budget %d bytes (%s); %.0f%% of %d bytes of free RAM is %.0f", b.Bytes, b.Source, 100*MemoryShare, avail, want)
	}
	if g := MemoryBudget(m, 123<<20); g.Bytes != 123<<20 || g.Source != "train.memory" {
		t.Errorf("given budget: %+v", g)
	}

	for _, tc := range []struct {
		memory string
		want   int
		says   string
	}{
		{"", MaxAutoMicroBatch, "free RAM), at the cap of 4096"},
		{"1MiB", AutoMicroBatch(ModelShape(m), 1<<20), "within a budget of 1 MiB (train.memory)"},
	} {
		cfg := testConfig()
		cfg.MicroBatch, cfg.Memory = 0, tc.memory
		tr, err := NewLoRATrainer(m, newAdapter(t, m, false), cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, says := tr.Config().MicroBatch, tr.Sizing()
		tr.Close()
		if got != tc.want || !strings.Contains(says, tc.says) || !strings.Contains(says, fmt.Sprintf("micro-batch up to %d tokens", got)) {
			t.Errorf("memory %q: micro-batch %d (%q), want %d and %q", tc.memory, got, says, tc.want, tc.says)
		}
	}
}

// TestParseBytes: sizes with binary units, and what is refused.
func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "auto": 0, "2GiB": 2 << 30, "1500 MiB": 1500 << 20, "0.5G": 1 << 29, "64k": 64 << 10, "3 gb": 3 << 30, "100B": 100} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"12", "GiB", "2 PiB", "-1GiB", "1e400G", "1.2.3M"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
	for n, want := range map[int64]string{512: "512 B", 48 << 20: "48 MiB", 3 << 29: "1.5 GiB", 1 << 40: "1 TiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestLongSequenceRunsAlone: a sequence longer than the micro-batch (and
// than the context made for it) runs alone in a context grown to hold it,
// with the loss, gradient and log-probs of one pass over everything.
func TestLongSequenceRunsAlone(t *testing.T) {
	m := load(t, false)
	a := newAdapter(t, m, true)
	exs := randomExamples(m, 3, 4)
	exs[1].Completion = append(exs[1].Completion, randomExamples(m, 2, 5)[0].Completion...) // 112 tokens
	run := func(mb int) (*Trainer, StepStats) {
		tr := microBatchTrainer(t, m, a, mb)
		st, err := tr.Gradient(context.Background(), exs)
		if err != nil {
			t.Fatal(err)
		}
		return tr, st
	}
	whole, st1 := run(512)
	alone, st2 := run(64)
	if st1.MicroBatches != 1 || st2.MicroBatches != 3 {
		t.Fatalf("micro-batches %d and %d, want 1 and 3", st1.MicroBatches, st2.MicroBatches)
	}
	if alone.capacity != 128 {
		t.Fatalf("context for %d tokens after a 112-token sequence, want 128", alone.capacity)
	}
	if math.Abs(st1.Loss-st2.Loss) > 1e-5*math.Max(1, math.Abs(st1.Loss)) {
		t.Fatalf("loss %g in one pass, %g with the long sequence alone", st1.Loss, st2.Loss)
	}
	if e := relErr(snapshotGrads(alone), snapshotGrads(whole)); e > 1e-4 {
		t.Fatalf("gradients differ: relative error %g", e)
	}
	logProbsAgree(t, whole, alone, exs, 1e-4)
}

// TestReleaseFreesAndRestores: Release gives back the training context's
// buffers (the RL loop samples while it holds none), and the next update
// grows the context back to its size in one step and computes what a
// trainer that never released computes, bit for bit.
func TestReleaseFreesAndRestores(t *testing.T) {
	m := load(t, false)
	exs := randomExamples(m, 6, 7)
	kept := microBatchTrainer(t, m, newAdapter(t, m, true), 256)
	freed := microBatchTrainer(t, m, newAdapter(t, m, true), 256)
	for step := range 3 {
		a, err := kept.Update(context.Background(), exs)
		if err != nil {
			t.Fatal(err)
		}
		held := freed.ComputeBufferBytes()
		b, err := freed.Update(context.Background(), exs)
		if err != nil {
			t.Fatal(err)
		}
		if step > 0 && freed.capacity != kept.capacity {
			t.Fatalf("step %d: context for %d tokens after Release, %d without", step, freed.capacity, kept.capacity)
		}
		before := freed.ComputeBufferBytes()
		if err := freed.Release(); err != nil {
			t.Fatal(err)
		}
		after := freed.ComputeBufferBytes()
		t.Logf("step %d: compute buffer %d -> %d bytes after Release (%d before the update)", step, before, after, held)
		if after*4 > before {
			t.Fatalf("step %d: compute buffer %d bytes after Release, %d before: want at most a quarter", step, after, before)
		}
		if a[0].Loss != b[0].Loss || a[0].GradNorm != b[0].GradNorm {
			t.Fatalf("step %d: loss %v, grad norm %v; with Release %v, %v", step, a[0].Loss, a[0].GradNorm, b[0].Loss, b[0].GradNorm)
		}
	}
	for i := range kept.values {
		for j := range kept.values[i] {
			if kept.values[i][j] != freed.values[i][j] {
				t.Fatalf("parameter %d[%d]: %v, with Release %v", i, j, kept.values[i][j], freed.values[i][j])
			}
		}
	}
}
