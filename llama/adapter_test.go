package llama_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

func TestAdapterChangeTakesEffect(t *testing.T) {
	m := loadTiny(t)
	path := filepath.Join(t.TempDir(), "lora.gguf")
	if err := train.CreateLoRA(m, path, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(m, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	toks, _ := m.Tokenize("12+7=", true, false)
	c := newCtx(t, m, llama.ContextParams{NCtx: 256})
	base := decodeOne(t, c, toks, 0)

	// A new adapter (B = 0) changes nothing.
	c.ClearKV()
	if err := c.SetAdapter(a, 1); err != nil {
		t.Fatal(err)
	}
	same := decodeOne(t, c, toks, 0)
	if d := maxDiff(same[len(toks)-1], base[len(toks)-1]); d != 0 {
		t.Fatalf("an adapter with B = 0 changed the logits by %g", d)
	}

	// Non-zero B: the next decode of the same shape must use it (llama.cpp
	// would otherwise reuse the graph built before the change; patch 0003).
	for _, name := range a.TensorNames() {
		if strings.HasSuffix(name, ".lora_b") {
			p, err := a.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			v := make([]float32, p.Len())
			for i := range v {
				v[i] = 0.5
			}
			p.Set(v)
		}
	}
	c.ClearKV()
	c.ClearAdapters()
	c.SetAdapter(a, 1)
	changed := decodeOne(t, c, toks, 0)
	if d := maxDiff(changed[len(toks)-1], base[len(toks)-1]); d < 1e-3 {
		t.Fatalf("a non-zero adapter changed the logits by only %g", d)
	}
	c.ClearKV()
	c.ClearAdapters()
	back := decodeOne(t, c, toks, 0)
	if d := maxDiff(back[len(toks)-1], base[len(toks)-1]); d != 0 {
		t.Fatalf("after removing the adapter the logits differ by %g", d)
	}
	if _, err := a.Tensor("blk.0.attn_q.weight.lora_c"); err == nil {
		t.Fatal("a tensor name without .lora_a/.lora_b must be an error")
	}
}

func TestAdapterForWrongModel(t *testing.T) {
	m := loadTiny(t)
	path := filepath.Join(t.TempDir(), "lora.gguf")
	if err := train.CreateLoRA(m, path, train.Config{LoraRank: 2, LoraAlpha: 4}); err != nil {
		t.Fatal(err)
	}
	dir := sharedModels(t)
	other, err := llama.LoadModel(filepath.Join(dir, "stories260K.gguf"), llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := llama.LoadAdapter(other, path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("an adapter for another model: err = %v", err)
	}
	if _, err := llama.LoadAdapter(m, tinyPath); err == nil || !strings.Contains(err.Error(), "not a LoRA adapter") {
		t.Fatalf("a model file as adapter: err = %v", err)
	}
}
