package llama_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// TestClosedHandles: every method of a closed handle returns ErrClosed (or
// a zero value) instead of passing a freed pointer to C; a second Close of a
// model or context returns ErrClosed, of a batch nil.
func TestClosedHandles(t *testing.T) {
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64})
	if err != nil {
		t.Fatal(err)
	}
	b := llama.NewBatch(8, 1)
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
	if _, err := b.Add(1, 0, []int{0}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(b); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("Decode on a closed context: %v", err)
	}
	if _, err := c.Logits(0); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("Logits on a closed context: %v", err)
	}
	c.ClearKV() // no-ops, no crash
	c.SeqKeep(0)
	b.Close()
	if _, err := b.Add(1, 0, []int{0}, true); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("Add on a closed batch: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("second Context.Close: %v, want ErrClosed", err)
	}
	if _, err := m.Tokenize("a", true, false); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("Tokenize on a closed model: %v", err)
	}
	if _, err := m.TokenPiece(1, false); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("TokenPiece on a closed model: %v", err)
	}
	if _, err := m.ApplyChatTemplate("chatml", []llama.Message{{Role: "user", Content: "hi"}}, true); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("ApplyChatTemplate on a closed model: %v", err)
	}
	if _, err := llama.NewContext(m, llama.ContextParams{}); err == nil {
		t.Error("NewContext on a closed model must fail")
	}
	if _, err := llama.LoadAdapter(m, tinyPath); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("LoadAdapter on a closed model: %v", err)
	}
	if m.Info().Vocab != 0 || m.IsEOG(2) || m.Meta("general.architecture") != "" {
		t.Error("a closed model's Info, IsEOG and Meta must be zero")
	}
}

func TestFileErrorsUnwrap(t *testing.T) {
	_, err := llama.LoadModel(filepath.Join(t.TempDir(), "missing.gguf"), llama.ModelParams{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing model: errors.Is(err, fs.ErrNotExist) is false for %v", err)
	}
	var fe *llama.FileError
	if !errors.As(err, &fe) || !strings.HasSuffix(fe.Path, "missing.gguf") {
		t.Fatalf("a missing model: %v is not a FileError naming the file", err)
	}
}

// TestErrorCapturedPerCall: adapters whose tensors have the wrong shape,
// loaded from several goroutines at once, each fail with llama.cpp's
// message about their own tensor, not another call's.
func TestErrorCapturedPerCall(t *testing.T) {
	m := loadTiny(t)
	s := modelgen.Tiny()
	dir := t.TempDir()
	names := []string{"attn_q", "attn_k", "attn_v", "attn_output"}
	paths := make([]string, len(names))
	for i, name := range names {
		w := llama.NewGGUFWriter()
		w.SetString("general.type", "adapter")
		w.SetString("general.architecture", "llama")
		w.SetString("adapter.type", "lora")
		w.SetFloat32("adapter.lora.alpha", 4)
		const r = 2
		w.AddTensorF32(fmt.Sprintf("blk.0.%s.weight.lora_a", name), []int64{int64(s.Embd + 1), r}, make([]float32, (s.Embd+1)*r))
		w.AddTensorF32(fmt.Sprintf("blk.0.%s.weight.lora_b", name), []int64{r, int64(s.Embd)}, make([]float32, r*s.Embd))
		paths[i] = filepath.Join(dir, name+".gguf")
		if err := w.WriteFile(paths[i]); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	var wg sync.WaitGroup
	errs := make([][]error, len(names))
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, err := llama.LoadAdapter(m, paths[i])
				errs[i] = append(errs[i], err)
			}
		}()
	}
	wg.Wait()
	for i, name := range names {
		for _, err := range errs[i] {
			if err == nil {
				t.Fatalf("%s: an adapter of the wrong shape loaded", name)
			}
			for j, other := range names {
				if j != i && strings.Contains(err.Error(), "blk.0."+other+".") {
					t.Fatalf("%s's error names another call's tensor: %v", name, err)
				}
			}
			if !strings.Contains(err.Error(), "blk.0."+name+".") {
				t.Fatalf("%s's error lacks llama.cpp's reason: %v", name, err)
			}
		}
	}
}

func TestDeviceByName(t *testing.T) {
	devs := llama.Backends()
	if len(devs) == 0 {
		t.Fatal("no ggml devices")
	}
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{Device: devs[0]})
	if err != nil {
		t.Fatalf("device %q: %v", devs[0], err)
	}
	m.Close()
	_, err = llama.LoadModel(tinyPath, llama.ModelParams{Device: "NoSuchGPU7"})
	if err == nil || !strings.Contains(err.Error(), devs[0]) {
		t.Fatalf("an unknown device: %v (want the known ones listed)", err)
	}
}
