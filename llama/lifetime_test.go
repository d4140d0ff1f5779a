package llama_test

import (
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/reference"
	"github.com/confclip/confclip/modelgen"
)

// TestEveryMethodAfterClose: every method of every handle, called after the
// handle's Close, returns ErrClosed (or, where it returns no error, a zero
// value) and never reaches C with a freed pointer. Before the discipline,
// Weight, WeightShape, CanTrain, PGEval, Adapter.Tensor and every
// GGUF/GGUFWriter method crashed in C.
func TestEveryMethodAfterClose(t *testing.T) {
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	adPath := writeTinyAdapter(t, m)
	a, err := llama.LoadAdapter(m, adPath)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.Weight("blk.0.attn_q.weight")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := a.Tensor(a.TensorNames()[0])
	if err != nil {
		t.Fatal(err)
	}
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, TrainingGraphs: true, Profile: true})
	if err != nil {
		t.Fatal(err)
	}
	b := llama.NewBatch(8, 1)
	if _, err := b.Add(1, 0, []int{0}, true); err != nil {
		t.Fatal(err)
	}
	g, err := llama.OpenGGUF(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	gw := llama.NewGGUFWriter()
	gw.SetString("general.architecture", "llama")

	// The model's Close closes its context and adapter first.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// Their own Close comes second, as a second os.File.Close does.
	if err := a.Close(); !errors.Is(err, llama.ErrClosed) {
		t.Fatalf("Adapter.Close after its model's Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, llama.ErrClosed) {
		t.Fatalf("Context.Close after its model's Close: %v, want ErrClosed", err)
	}
	g.Close()
	gw.Close()

	seqs := []llama.PGSeq{{Tokens: []llama.Token{1, 2, 3}, NPrompt: 1, Weight: 1}}
	vals := make([]float32, w.Len())
	errs := map[string]func() error{
		"Model.Weight":      func() error { _, err := m.Weight("blk.0.attn_q.weight"); return err },
		"Model.WeightShape": func() error { _, err := m.WeightShape("blk.0.attn_q.weight"); return err },
		"Model.CanTrain":    m.CanTrain,
		"Model.Tokenize":    func() error { _, err := m.Tokenize("a", true, false); return err },
		"Model.TokenPiece":  func() error { _, err := m.TokenPiece(1, false); return err },
		"Model.Detokenize":  func() error { _, err := m.Detokenize([]llama.Token{1}, false, false); return err },
		"Model.ApplyChatTemplate": func() error {
			_, err := m.ApplyChatTemplate("chatml", []llama.Message{{Role: "user", Content: "hi"}}, true)
			return err
		},
		"NewContext":              func() error { _, err := llama.NewContext(m, llama.ContextParams{}); return err },
		"LoadAdapter":             func() error { _, err := llama.LoadAdapter(m, adPath); return err },
		"Context.Decode":          func() error { return c.Decode(b) },
		"Context.Logits":          func() error { _, err := c.Logits(0); return err },
		"Context.CopyLogits":      func() error { return c.CopyLogits(0, make([]float32, 8)) },
		"Context.SetAdapter":      func() error { return c.SetAdapter(a, 1) },
		"Context.PGEval":          func() error { _, _, err := c.PGEval(seqs, nil, nil); return err },
		"reference.BatchedGreedy": func() error { _, err := reference.BatchedGreedy(c, []llama.Token{1}, 1, 1); return err },
		"Adapter.Tensor":          func() error { _, err := a.Tensor(a.TensorNames()[0]); return err },
		"Param.Get (model)":       func() error { return w.Get(vals) },
		"Param.Set (model)":       func() error { return w.Set(vals) },
		"Param.Get (adapter)":     func() error { return lb.Get(make([]float32, lb.Len())) },
		"Param.Set (adapter)":     func() error { return lb.Set(make([]float32, lb.Len())) },
		"GGUFWriter.WriteFile": func() error {
			gw.SetStrings("tokenizer.ggml.tokens", []string{"a", "b"})
			gw.AddTensorF32("x", []int64{2}, []float32{1, 2})
			return gw.WriteFile(filepath.Join(t.TempDir(), "x.gguf"))
		},
	}
	for name, f := range errs {
		if err := f(); !errors.Is(err, llama.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	b.Close()
	if _, err := b.Add(1, 0, []int{0}, true); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("Batch.Add after Close: %v", err)
	}

	// Methods without an error: zero values, no crash.
	c.SetThreads(1)
	c.SeqCopy(0, 1, 0, -1)
	c.SeqKeep(0)
	c.ClearKV()
	c.RemoveAdapter(a)
	c.ClearAdapters()
	c.ResetProfile()
	zeros := map[string]bool{
		"Context.SeqRemove":          c.SeqRemove(0, 0, -1),
		"Context.SeqPosMax":          c.SeqPosMax(0) != -1,
		"Context.ComputeBufferBytes": c.ComputeBufferBytes() != 0,
		"Context.Adapters":           c.Adapters() != 0,
		"Context.Profile":            c.Profile() != nil,
		"Model.Info":                 m.Info() != llama.Info{Vocab: m.NVocab()} && m.Info() != llama.Info{},
		"Model.Meta":                 m.Meta("general.architecture") != "",
		"Model.ChatTemplate":         m.ChatTemplate() != "",
		"Model.IsEOG":                m.IsEOG(2),
		"GGUF.Keys":                  g.Keys() != nil,
		"GGUF.Tensors":               g.Tensors() != nil,
		"GGUF.String":                g.String("general.architecture") != "",
		"GGUF.Uint":                  g.Uint("llama.block_count", 7) != 7,
	}
	if _, ok := g.Get("general.architecture"); ok {
		zeros["GGUF.Get"] = true
	}
	for name, nonzero := range zeros {
		if nonzero {
			t.Errorf("%s after Close is not the zero value", name)
		}
	}
	// A second Close of a llama.cpp handle is ErrClosed, as os.File's;
	// the Go-side buffers (Batch, GGUF, GGUFWriter) take it quietly.
	for name, f := range map[string]func() error{"Model": m.Close, "Context": c.Close, "Adapter": a.Close} {
		if err := f(); !errors.Is(err, llama.ErrClosed) {
			t.Errorf("second %s.Close: %v, want ErrClosed", name, err)
		}
	}
	for name, f := range map[string]func() error{"Batch": b.Close, "GGUF": g.Close, "GGUFWriter": gw.Close} {
		if err := f(); err != nil {
			t.Errorf("second %s.Close: %v", name, err)
		}
	}
}

// TestContextHoldsItsAdapter: an adapter set on a context stays alive while
// the context uses it, even when the caller drops it without Close; Close
// of an adapter in use is refused; removed, it may be closed.
func TestContextHoldsItsAdapter(t *testing.T) {
	m := loadTiny(t)
	adPath := writeTinyAdapter(t, m)
	toks, _ := m.Tokenize("12+7=", true, false)

	ref := newCtx(t, m, llama.ContextParams{NCtx: 64})
	held, err := llama.LoadAdapter(m, adPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.SetAdapter(held, 1); err != nil {
		t.Fatal(err)
	}
	want := decodeOne(t, ref, toks, 0)[len(toks)-1]

	c := newCtx(t, m, llama.ContextParams{NCtx: 64})
	func() {
		dropped, err := llama.LoadAdapter(m, adPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetAdapter(dropped, 1); err != nil {
			t.Fatal(err)
		}
	}()
	for range 5 {
		runtime.GC() // the adapter's cleanup would run here if nothing held it
	}
	// Its own LoRA-sized buffers, if freed, would be reused by these.
	for range 20 {
		a, err := llama.LoadAdapter(m, adPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := decodeOne(t, c, toks, 0)[len(toks)-1]; !slices.Equal(got, want) {
		t.Fatalf("the context lost its dropped adapter: logits differ by %g", maxDiff(got, want))
	}

	if err := held.Close(); !errors.Is(err, llama.ErrAdapterInUse) {
		t.Fatalf("Close of an adapter set on a context: %v, want ErrAdapterInUse", err)
	}
	ref.ClearKV()
	if again := decodeOne(t, ref, toks, 0)[len(toks)-1]; !slices.Equal(again, want) {
		t.Fatal("a refused Close changed the context's adapter")
	}
	ref.RemoveAdapter(held)
	if n := ref.Adapters(); n != 0 {
		t.Fatalf("%d adapters after RemoveAdapter", n)
	}
	if err := held.Close(); err != nil {
		t.Fatalf("Close of a removed adapter: %v", err)
	}
	if _, err := held.Tensor(held.TensorNames()[0]); !errors.Is(err, llama.ErrClosed) {
		t.Fatalf("Tensor of a closed adapter: %v", err)
	}
}

// TestParamHoldsItsOwner: a Param keeps its adapter alive after the caller
// dropped the adapter (its values still read back as written).
func TestParamHoldsItsOwner(t *testing.T) {
	m := loadTiny(t)
	adPath := writeTinyAdapter(t, m)
	var p *llama.Param
	func() {
		a, err := llama.LoadAdapter(m, adPath)
		if err != nil {
			t.Fatal(err)
		}
		p, err = a.Tensor(a.TensorNames()[0])
		if err != nil {
			t.Fatal(err)
		}
	}()
	v := make([]float32, p.Len())
	for i := range v {
		v[i] = float32(i) * 0.25
	}
	if err := p.Set(v); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		runtime.GC()
	}
	for range 20 { // reuse what a freed adapter would have left
		a, err := llama.LoadAdapter(m, adPath)
		if err != nil {
			t.Fatal(err)
		}
		q, err := a.Tensor(a.TensorNames()[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Set(make([]float32, q.Len())); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]float32, p.Len())
	if err := p.Get(got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, v) {
		t.Fatal("a Param's values changed after its adapter was dropped: the adapter was freed under it")
	}
}

// TestModelCloseClosesContexts: closing a model with a live context closes
// the context (llama_free after llama_model_free reads the freed model, a
// FIXME in llama.cpp), and the context's own Close afterwards is ErrClosed.
func TestModelCloseClosesContexts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := modelgen.Write(path, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		m, err := llama.LoadModel(path, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64})
		if err != nil {
			t.Fatal(err)
		}
		decodeOne(t, c, []llama.Token{1, 2, 3}, 0)
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(llama.NewBatch(1, 1)); !errors.Is(err, llama.ErrClosed) {
			t.Fatalf("Decode on a context of a closed model: %v", err)
		}
		if err := c.Close(); !errors.Is(err, llama.ErrClosed) {
			t.Fatalf("Context.Close after its model's: %v, want ErrClosed", err)
		}
	}
}
