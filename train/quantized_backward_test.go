package train

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/modelgen"
)

// quantizedBackwardBound is how far, relative to its norm, a LoRA gradient
// may move when the backward product through the quantized weights runs in
// Q8_0 (train.quantized_backward) instead of F32, by weight type. Measured
// on the model below (relative L2 distance): Q8_0 1.30e-2, Q4_0 1.02e-2,
// Q4_K_M 1.14e-2, Q6_K 1.15e-2 (7 December 2026, Intel Xeon, AVX-512); the
// bound is about twice that. Q8_0's rounding of W^T and of dY, through both
// layers, is that size; it is less than the base's own quantization moves
// the gradient (TestLoRAGradientQuantizedBase: the Q8_0 base's gradient
// is 4e-2 from the F32 model's). A wrong row, block or transposition gives
// a distance near 1.
var quantizedBackwardBound = map[string]float64{"q8_0": 2.5e-2, "q4_0": 2.5e-2, "q4_k_m": 2.5e-2, "q6_k": 2.5e-2}

// TestQuantizedBackward compares the LoRA gradient over a quantized base
// with the backward product in Q8_0 integer dot products (patch 0060)
// against the same gradient with the F32 product, for the weight types the
// issue names, on a model wide enough for the K-quants (rows of 256).
func TestQuantizedBackward(t *testing.T) {
	spec := modelgen.Tiny()
	spec.Name, spec.Embd, spec.FF = "confclip-qback", 256, 512
	f32 := filepath.Join(t.TempDir(), "qback.gguf")
	if err := modelgen.Write(f32, spec); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q8_0", "q4_0", "q4_k_m", "q6_k"} {
		t.Run(q, func(t *testing.T) {
			m := quantizedModel(t, f32, q)
			if ft := m.Info().FileType; !strings.HasPrefix(strings.ToLower(ft), q) {
				t.Fatalf("file type %s, want %s", ft, q)
			}
			cfg := testConfig()
			exact, n := trainerGradient(t, m, cfg)
			if n != 0 {
				t.Fatalf("with quantized_backward off the context made %d bytes of copies", n)
			}
			cfg.QuantizedBackward = true
			fast, n := trainerGradient(t, m, cfg)
			// every projection's W^T: Q, K, V, O, gate, up, down in 2 layers
			// and the output matrix, 34 bytes for 32 weights
			if n < int64(m.Info().Params-uint64(m.NVocab()*spec.Embd))*34/32/2 {
				t.Fatalf("the copies of W^T are %d bytes for %d weights: the products were not rewritten", n, m.Info().Params)
			}
			var d, ref, dot, nf float64
			for i := range exact {
				d += (fast[i] - exact[i]) * (fast[i] - exact[i])
				ref += exact[i] * exact[i]
				nf += fast[i] * fast[i]
				dot += fast[i] * exact[i]
			}
			rel, cos := math.Sqrt(d/ref), dot/math.Sqrt(ref*nf)
			t.Logf("%s: Q8_0 backward against F32: relative distance %.2e, cosine %.7f, copies %d bytes", q, rel, cos, n)
			if !(rel <= quantizedBackwardBound[q]) {
				t.Fatalf("%s: the gradient with the Q8_0 backward product is %.2e from the F32 one (relative), want <= %g", q, rel, quantizedBackwardBound[q])
			}
		})
	}
}
