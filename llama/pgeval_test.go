package llama_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// TestPGEvalErrorRestoresContext: a training evaluation that fails after it
// has changed the context (here: a 16-layer graph is too large for a
// backward pass in a context made without TrainingGraphs, found after the
// graph is built and the params flagged) leaves the context as it was:
// decoding (with flash attention, which the training graph turns off) gives
// the same logits bit for bit, a forward-only evaluation still
// works, and repeated failures do not grow the C heap.
func TestPGEvalErrorRestoresContext(t *testing.T) {
	s := modelgen.Tiny()
	s.Layers, s.Embd, s.FF = 16, 16, 32
	path := filepath.Join(t.TempDir(), "deep.gguf")
	if err := modelgen.Write(path, s); err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NUBatch: 256, Threads: 2, FlashAttn: llama.FlashAttnOn})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks := []llama.Token{1, 270, 281, 292, 303, 314, 325}
	decode := func() []float32 {
		c.ClearKV()
		b := llama.NewBatch(len(toks), 1)
		defer b.Close()
		for i, tok := range toks {
			b.Add(tok, i, []int{0}, i == len(toks)-1)
		}
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		l, err := c.Logits(len(toks) - 1)
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), l...)
	}
	before := decode()
	w, err := m.Weight("blk.0.attn_q.weight")
	if err != nil {
		t.Fatal(err)
	}
	seqs := []llama.PGSeq{{Tokens: toks, NPrompt: 3, Weight: 1}}
	fail := func() {
		_, _, err := c.PGEval(seqs, []*llama.Param{w}, [][]float32{make([]float32, w.Len())})
		if err == nil || !strings.Contains(err.Error(), "backward pass") {
			t.Fatalf("want the graph-size error, got %v", err)
		}
	}
	fail()
	if after := decode(); !slices.Equal(before, after) {
		t.Fatal("decoding after a failed training evaluation gives other logits")
	}
	// Forward only (no params): works on the same context, and agrees with decoding.
	_, lp, err := c.PGEval(seqs, nil, nil)
	if err != nil {
		t.Fatalf("forward-only evaluation after a failed one: %v", err)
	}
	if len(lp) != len(toks)-3 {
		t.Fatalf("%d log-probs, want %d", len(lp), len(toks)-3)
	}
	if after := decode(); !slices.Equal(before, after) {
		t.Fatal("decoding after a forward-only evaluation gives other logits")
	}
	llama.MallocTrim()
	heap0 := llama.CHeapInUse()
	for i := 0; i < 50; i++ {
		fail()
	}
	llama.MallocTrim()
	if grown := llama.CHeapInUse() - heap0; grown > 256<<10 {
		t.Fatalf("50 failed evaluations grew the C heap by %d bytes", grown)
	}
}
