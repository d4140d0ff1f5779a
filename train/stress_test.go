package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/confclip/confclip/llama"
)

// TestStressTraining: trainer steps, adapter saves (GGUF writes) and
// reloads, and trainers and adapters dropped without Close, over and over
// while the collector runs. `make test` runs it under GOGC=1 and
// GOEXPERIMENT=cgocheck2 with CONFCLIP_STRESS_ROUNDS set (llama's
// TestStressBindings says why).
func TestStressTraining(t *testing.T) {
	rounds := 2
	if s := os.Getenv("CONFCLIP_STRESS_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CONFCLIP_STRESS_ROUNDS=%q: want a positive integer", s)
		}
		rounds = n
	}
	m := load(t, false)
	exs := examples(t, m)
	dir := t.TempDir()
	path := filepath.Join(dir, "lora.gguf")
	if err := CreateLoRA(m, path, Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		a, err := llama.LoadAdapter(m, path)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewLoRATrainer(m, a, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		st, err := tr.Step(context.Background(), exs)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(st.Loss) {
			t.Fatalf("round %d: loss is NaN", round)
		}
		next := filepath.Join(dir, fmt.Sprintf("lora%d.gguf", round%2))
		if err := SaveLoRA(a, m.Architecture(), next); err != nil {
			t.Fatal(err)
		}
		path = next
		if round%2 == 0 {
			if err := tr.Close(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
		} // else both dropped: the trainer's context holds the adapter
		runtime.GC()
	}
}
