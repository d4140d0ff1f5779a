package modelgen_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/testkit/testutil"
)

// TestShapeMatchesRealFile: the shapes of the two real models `make
// real-models` downloads, written by gen-model's generator, against the
// files: the same tensors with the same value counts, every hyperparameter
// key the real file has (under its architecture) with the same value, the
// same vocabulary size, and llama.cpp counts the same parameters.
func TestShapeMatchesRealFile(t *testing.T) {
	for _, c := range []struct{ shape, real string }{
		{"smollm2-135m", "smollm2-135m-instruct"},
		{"gemma-3-270m", "gemma3-270m"},
	} {
		t.Run(c.shape, func(t *testing.T) {
			realPath := testutil.RealModel(t, c.real)
			s, err := modelgen.Shape(c.shape)
			if err != nil {
				t.Fatal(err)
			}
			gen := filepath.Join(t.TempDir(), c.shape+".gguf")
			if err := modelgen.Write(gen, s); err != nil {
				t.Fatal(err)
			}
			rg, err := llama.OpenGGUF(realPath)
			if err != nil {
				t.Fatal(err)
			}
			defer rg.Close()
			gg, err := llama.OpenGGUF(gen)
			if err != nil {
				t.Fatal(err)
			}
			defer gg.Close()

			want := map[string]int64{}
			for _, ti := range rg.Tensors() {
				want[ti.Name] = ti.Elements
			}
			got := map[string]int64{}
			for _, ti := range gg.Tensors() {
				got[ti.Name] = ti.Elements
			}
			for name, n := range want {
				if got[name] != n {
					t.Errorf("tensor %s: %d values generated, %d in the real file", name, got[name], n)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("tensor %s generated, not in the real file", name)
				}
			}

			arch := rg.String("general.architecture")
			if g := gg.String("general.architecture"); g != arch {
				t.Fatalf("architecture %s generated, %s real", g, arch)
			}
			for _, k := range rg.Keys() {
				if !strings.HasPrefix(k, arch+".") {
					continue
				}
				rv, _ := rg.Get(k)
				gv, ok := gg.Get(k)
				if !ok || gv != rv {
					t.Errorf("%s: %v generated, %v real", k, gv, rv)
				}
			}
			rt, _ := rg.Get("tokenizer.ggml.tokens")
			gt, _ := gg.Get("tokenizer.ggml.tokens")
			if rt != gt {
				t.Errorf("vocabulary: %v tokens generated, %v real", gt, rt)
			}

			params := func(path string) uint64 {
				m, err := llama.LoadModel(path, llama.ModelParams{})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				return m.Info().Params
			}
			if g, r := params(gen), params(realPath); g != r {
				t.Errorf("llama.cpp counts %d parameters in the generated file, %d in the real one", g, r)
			}
		})
	}
}
