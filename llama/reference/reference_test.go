package reference_test

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/llama/reference"
	"github.com/confclip/confclip/testkit/testutil"
)

// TestBatchedSampled checks the sampled C loop the rollout
// benchmark compares against: the same seed gives the same draws, another
// seed others, and the sampled tokens' mean log-probability is that of draws
// from the model's softmax (below 0, above -log(vocab): a uniform
// distribution's, which a trained model's rows are far from).
func TestBatchedSampled(t *testing.T) {
	m, err := llama.LoadModel(filepath.Join(testutil.SharedModels(t), "stories260K.gguf"), llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 4 * 64, NSeqMax: 4, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prompt, err := m.Tokenize("Once upon a time", true, false)
	if err != nil {
		t.Fatal(err)
	}
	run := func(seed uint64) (int, float64) {
		n, lp, err := reference.BatchedSampled(c, prompt, 4, 32, seed)
		if err != nil {
			t.Fatal(err)
		}
		return n, lp
	}
	n1, lp1 := run(1)
	n1b, lp1b := run(1)
	n2, lp2 := run(2)
	if n1 != n1b || lp1 != lp1b {
		t.Fatalf("seed 1 twice: %d tokens sum %g, then %d tokens sum %g", n1, lp1, n1b, lp1b)
	}
	if n1 < 4 || n1 > 4*32 || n2 < 4 {
		t.Fatalf("%d and %d tokens from 4 sequences of at most 32", n1, n2)
	}
	if lp1 == lp2 {
		t.Fatalf("seeds 1 and 2 gave the same log-prob sum %g", lp1)
	}
	for _, mean := range []float64{lp1 / float64(n1), lp2 / float64(n2)} {
		if !(mean < 0 && mean > -math.Log(float64(m.NVocab()))) {
			t.Fatalf("mean sampled log-prob %g: want in (-log %d, 0)", mean, m.NVocab())
		}
	}
	t.Logf("seed 1: %d tokens, mean log-prob %.3f; seed 2: %d tokens, mean %.3f", n1, lp1/float64(n1), n2, lp2/float64(n2))
}

// TestBatchedChecks: a group larger than the context's sequences, an empty
// prompt and a closed context are errors, before any C call.
func TestBatchedChecks(t *testing.T) {
	m, err := llama.LoadModel(filepath.Join(testutil.SharedModels(t), "stories260K.gguf"), llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 128, NSeqMax: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reference.BatchedGreedy(c, []llama.Token{1}, 3, 4); err == nil {
		t.Error("a group of 3 on a context of 2 sequences: no error")
	}
	if _, err := reference.BatchedGreedy(c, nil, 1, 4); err == nil {
		t.Error("an empty prompt: no error")
	}
	if n, err := reference.BatchedGreedy(c, []llama.Token{1}, 2, 4); err != nil || n < 2 {
		t.Errorf("a group of 2: %d tokens, %v", n, err)
	}
	c.Close()
	if _, err := reference.BatchedGreedy(c, []llama.Token{1}, 1, 4); !errors.Is(err, llama.ErrClosed) {
		t.Errorf("on a closed context: %v, want ErrClosed", err)
	}
}
