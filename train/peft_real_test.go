package train

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/testkit/testutil"
)

// TestRealModelsPEFTReadBack exports an adapter of each real model to PEFT
// and reads it back with PEFT itself (scripts/peft_readback.py in the
// environment `make peft-venv` makes; NOT RUN without it or the models).
//
// SmolLM2-135M-Instruct: transformers loads the base from the GGUF file
// (its exact F32 copy, so both sides compute with the same weights), PEFT
// puts the adapter on it, and every completion token's log-prob must equal
// llama.cpp's with the GGUF adapter within peftBound. The adapter has
// random A and B on all seven weights of every layer, so a wrong name,
// transpose, scale or q/k row order would move the log-probs by far more
// (the adapter's own effect is logged and must be at least 20 bounds).
//
// Gemma 3 270M: transformers 4.46 (the newest that runs on Debian's torch
// 1.13) has no Gemma 3, so PEFT reads the folder without a base:
// LoraConfig.from_pretrained and load_peft_weights, every tensor's
// Hugging Face name and shape checked.
func TestRealModelsPEFTReadBack(t *testing.T) {
	python, script := testutil.PEFTPython(t, "peft_readback.py")
	// Measured (3 December 2026, AMD Zen 4, native build): 3.6e-5 at most
	// over 21 tokens, float32 sums in another order through 30 layers; the
	// adapter itself moves them by up to 0.56.
	const peftBound = 5e-4

	t.Run("smollm2-135m-instruct", func(t *testing.T) {
		src := testutil.RealModel(t, "smollm2-135m-instruct")
		dir := t.TempDir()
		f32 := filepath.Join(dir, "smollm2-f32.gguf")
		if err := llama.Quantize(src, f32, "f32", 0); err != nil {
			t.Fatal(err)
		}
		m, err := llama.LoadModel(f32, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		a := randomLoRA(t, m, 0.05)
		exs := tokenizedExamples(t, m, [][2]string{
			{"<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n", "3 plus 4 is 7. The answer is 7."},
			{"Tom has 5 apples and eats 2.", " He has 3 apples left."},
		})
		tr, err := NewLoRATrainer(m, a, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		ours, err := tr.LogProbs(exs)
		if err != nil {
			t.Fatal(err)
		}
		peftDir := exportPEFT(t, m, a, dir)

		type seq struct {
			Prompt     []llama.Token `json:"prompt"`
			Completion []llama.Token `json:"completion"`
		}
		var seqs []seq
		for _, e := range exs {
			seqs = append(seqs, seq{e.Prompt, e.Completion})
		}
		tokens := filepath.Join(dir, "tokens.json")
		b, _ := json.Marshal(seqs)
		if err := os.WriteFile(tokens, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var res struct {
			Adapter, Base [][]float64
			Versions      map[string]string
		}
		runPython(t, &res, python, script, "model", "--gguf", f32, "--peft", peftDir, "--tokens", tokens)
		var worst, effect float64
		n := 0
		for i := range ours {
			if len(res.Adapter[i]) != len(ours[i]) {
				t.Fatalf("sequence %d: %d log-probs from PEFT, %d from llama.cpp", i, len(res.Adapter[i]), len(ours[i]))
			}
			for k, lp := range ours[i] {
				worst = math.Max(worst, math.Abs(res.Adapter[i][k]-float64(lp)))
				effect = math.Max(effect, math.Abs(res.Base[i][k]-float64(lp)))
				n++
			}
		}
		t.Logf("%v: PEFT's log-probs against llama.cpp's over %d tokens: largest difference %.3g (bound %g); the adapter itself moves them by up to %.3g",
			res.Versions, n, worst, peftBound, effect)
		if !(worst <= peftBound) {
			t.Fatalf("PEFT's log-probs differ from llama.cpp's by %.3g, bound %g", worst, peftBound)
		}
		if !(effect >= 20*peftBound) {
			t.Fatalf("the adapter moves the log-probs by only %.3g: the check would not see a wrong adapter", effect)
		}
	})

	t.Run("gemma3-270m", func(t *testing.T) {
		src := testutil.RealModel(t, "gemma3-270m")
		m, err := llama.LoadModel(src, llama.ModelParams{NoRepack: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		a := randomLoRA(t, m, 0.05)
		peftDir := exportPEFT(t, m, a, t.TempDir())
		var res struct {
			R        int               `json:"r"`
			Alpha    float64           `json:"lora_alpha"`
			Targets  []string          `json:"target_modules"`
			Tensors  map[string][]int  `json:"tensors"`
			Versions map[string]string `json:"versions"`
		}
		runPython(t, &res, python, script, "weights", "--peft", peftDir)
		want := []string{"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}
		layers := m.Info().Layers
		if res.R != 8 || res.Alpha != 16 || strings.Join(res.Targets, " ") != strings.Join(want, " ") || len(res.Tensors) != 2*len(want)*layers {
			t.Fatalf("PEFT read r %d, alpha %g, targets %v, %d tensors (want 8, 16, %v, %d)", res.R, res.Alpha, res.Targets, len(res.Tensors), want, 2*len(want)*layers)
		}
		name := regexp.MustCompile(`^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+_proj)\.lora_(A|B)\.weight$`)
		for k, shape := range res.Tensors {
			g := name.FindStringSubmatch(k)
			if g == nil || len(shape) != 2 || (g[4] == "A" && shape[0] != 8) || (g[4] == "B" && shape[1] != 8) {
				t.Fatalf("PEFT read tensor %s with shape %v", k, shape)
			}
		}
		t.Logf("%v: PEFT read r %d, alpha %g, %d tensors over %d layers", res.Versions, res.R, res.Alpha, len(res.Tensors), layers)
	})
}

// randomLoRA is a rank-8, alpha-16 adapter of every weight of m whose B is
// drawn from N(0, sigma²), so that it changes the model.
func randomLoRA(t *testing.T, m *llama.Model, sigma float64) *llama.Adapter {
	t.Helper()
	a := loraAdapter(t, m, Config{LoraRank: 8, LoraAlpha: 16, Seed: 11}, false)
	randomizeB(t, a, rand.New(rand.NewPCG(5, 6)), sigma)
	return a
}

// exportPEFT saves a and converts it into a PEFT folder under dir.
func exportPEFT(t *testing.T, m *llama.Model, a *llama.Adapter, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "lora.gguf")
	if err := SaveLoRA(a, m.Architecture(), src); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "peft")
	if _, err := ExportPEFT(m, src, out, ""); err != nil {
		t.Fatal(err)
	}
	return out
}

// runPython runs the script's mode and decodes its JSON output into v.
func runPython(t *testing.T, v any, python string, args ...string) {
	t.Helper()
	cmd := exec.Command(python, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(args[0]), args[1], err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("%s %s printed %q: %v", filepath.Base(args[0]), args[1], out, err)
	}
}
