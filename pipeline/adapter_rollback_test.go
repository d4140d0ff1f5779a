package pipeline

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

// writeAdapter writes an adapter for the model at cfg's path whose B
// matrices are not zero (so it changes the log-probs), distinct by seed.
func writeAdapter(t *testing.T, cfg Config, seed uint64) string {
	t.Helper()
	m, err := llama.LoadModel(cfg.Model.Path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh.gguf")
	if err := train.CreateLoRA(m, fresh, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(m, fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, name := range a.TensorNames() {
		if !strings.HasSuffix(name, ".lora_b") {
			continue
		}
		p, err := a.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, p.Len())
		for i := range v {
			v[i] = float32((i+int(seed))%7-3) * 0.05
		}
		if err := p.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "adapter.gguf")
	if err := train.SaveLoRA(a, m.Architecture(), path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadAdapterRollsBack: when the k-th engine refuses the new adapter,
// the engines before it go back to the adapter they had (before, they kept
// the new one, which LoadAdapter then freed under them), and the model still
// names the old adapter.
func TestLoadAdapterRollsBack(t *testing.T) {
	cfg, _ := apiFixture(t)
	oldPath, newPath := writeAdapter(t, cfg, 1), writeAdapter(t, cfg, 2)
	cfg.Model.Adapter = oldPath
	m := openModel(t, cfg)
	e, err := m.engine(EngineOptions(cfg))
	if err != nil {
		t.Fatal(err)
	}
	force := func() []float64 {
		r := &dataset.Rollout{PromptID: "a", Prompt: "What is 12+7?", Text: " The answer is 19."}
		if err := e.TeacherForce(context.Background(), []*dataset.Rollout{r}); err != nil {
			t.Fatal(err)
		}
		return r.Logprobs
	}
	before := force()

	// An engine of another model: it refuses this model's adapter.
	other := openModel(t, Config{Model: ModelConfig{Path: cfg.Model.Path}})
	foreign, err := other.engine(EngineOptions(cfg))
	if err != nil {
		t.Fatal(err)
	}
	r := &dataset.Rollout{PromptID: "a", Prompt: "x", Text: " y"}
	if err := foreign.TeacherForce(context.Background(), []*dataset.Rollout{r}); err != nil {
		t.Fatal(err) // makes its context, so that SetAdapter reaches it
	}
	m.engines = append(m.engines, foreign)
	defer func() { m.engines = m.engines[:1] }() // other closes it

	if err := m.LoadAdapter(newPath); err == nil {
		t.Fatal("LoadAdapter with an engine of another model: no error")
	}
	if got := m.AdapterPath(); got != oldPath {
		t.Fatalf("after the failed load the model names %q, want %q", got, oldPath)
	}
	for range 3 { // what the new adapter's freed memory would be reused by
		if _, err := llama.LoadAdapter(m.llm, newPath); err != nil {
			t.Fatal(err)
		}
	}
	if after := force(); !slices.Equal(after, before) {
		t.Fatalf("after the failed load the first engine computes other log-probs: %v, want %v", after, before)
	}
}

// TestAdapterPathRaceFree: AdapterPath and AdapterSHA256 read while another
// goroutine loads adapters (the server's HTTP handlers and its loop); the
// race detector (`make test` runs pipeline with -race) fails it when the
// adapter is read unguarded.
func TestAdapterPathRaceFree(t *testing.T) {
	cfg, _ := apiFixture(t)
	a, b := writeAdapter(t, cfg, 1), writeAdapter(t, cfg, 2)
	m := openModel(t, cfg)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if p := m.AdapterPath(); p != "" && p != a && p != b {
				t.Errorf("AdapterPath %q", p)
				return
			}
			if _, err := m.AdapterSHA256(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range 10 {
		if err := m.LoadAdapter([]string{a, b}[i%2]); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
}
