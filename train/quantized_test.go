package train

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
)

// LoRA gradients over a quantized frozen base go through the backward
// product with a quantized weight (patch 0031's kernel dequantizes blocks of
// its rows). A finite-difference check does not apply there (the forward
// product quantizes its activations, so the loss is not smooth at the
// check's step), so the gradient is compared with the one over the F32 model
// the base was quantized from, same adapter, same examples: they differ by
// the quantization error only. A wrong row or block in the backward product
// would turn the gradient's direction.
func TestLoRAGradientQuantizedBase(t *testing.T) {
	grad := func(m *llama.Model) []float64 { return loraGradient(t, m) } // seeded: the same adapter for every base
	ref := grad(load(t, false))
	for _, c := range []struct {
		q      string
		minCos float64
	}{{"q8_0", 0.998}} { // Q8_0 (measured 0.9992); Q4_0's own error turns a tiny model's gradient too far to tell a bug from it
		t.Run(c.q, func(t *testing.T) {
			m := quantizedModel(t, tinyPath, c.q)
			if ft := m.Info().FileType; !strings.EqualFold(ft, c.q) {
				t.Fatalf("file type %s, want %s", ft, c.q)
			}
			g := grad(m)
			var dot, n1, n2 float64
			for i := range g {
				dot += g[i] * ref[i]
				n1 += g[i] * g[i]
				n2 += ref[i] * ref[i]
			}
			cos := dot / math.Sqrt(n1*n2)
			t.Logf("%s base: gradient cosine to the F32 base's %.6f, norm ratio %.4f", c.q, cos, math.Sqrt(n1/n2))
			if !(cos >= c.minCos) {
				t.Fatalf("%s base: gradient cosine to the F32 base's %.6f, want >= %g", c.q, cos, c.minCos)
			}
		})
	}
}

// A base whose weights llama.cpp repacked for the CPU at load (Q4_0 here)
// has no backward product: the trainer says so instead of ggml aborting.
func TestRepackedBaseRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny-q4_0.gguf")
	if err := llama.Quantize(tinyPath, path, "q4_0", 0); err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a := newAdapter(t, m, false)
	tr, err := NewLoRATrainer(m, a, testConfig())
	if err == nil {
		tr.Close()
		t.Fatal("a trainer over a repacked Q4_0 base was created")
	}
	if !strings.Contains(err.Error(), "NoRepack") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name the file and NoRepack", err)
	}
}

// TestTrainingRefusesHalfWeights: ggml's CPU backend has no backward product
// (OUT_PROD) for F16 or BF16 weights, and its scheduler aborted the process
// (GGML_ASSERT(*cur_backend_id != -1) in ggml_backend_sched_split_graph) on
// the first training step over an F16 model. The trainer now refuses such a
// base with an error that names the file and the type, before any graph.
func TestTrainingRefusesHalfWeights(t *testing.T) {
	for _, q := range []string{"f16"} { // llama.Quantize writes no BF16; the check covers it the same way
		t.Run(q, func(t *testing.T) {
			m := quantizedModel(t, tinyPath, q)
			path := m.Path()
			a := newAdapter(t, m, true)
			tr, err := NewLoRATrainer(m, a, testConfig())
			if err == nil {
				_, err = tr.Gradient(context.Background(), examples(t, m))
				tr.Close()
			}
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(strings.ToLower(err.Error()), q) {
				t.Fatalf("training over a %s model: err %v, want an error naming %s and %s", q, err, path, q)
			}
			t.Logf("%v", err)
		})
	}
}

// quantizedModel quantizes the model at src to q in a temporary folder and
// loads it in the file's layout (NoRepack: a training model), closed when
// the test ends.
func quantizedModel(t *testing.T, src, q string) *llama.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".gguf")+"-"+q+".gguf")
	if err := llama.Quantize(src, path, q, 0); err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(path, llama.ModelParams{NoRepack: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
