package llama_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
)

// greedy generates n tokens by argmax from a prompt, one sequence.
func greedy(t *testing.T, m *llama.Model, prompt []llama.Token, n int) []llama.Token {
	t.Helper()
	c := newCtx(t, m, llama.ContextParams{NCtx: 512})
	b := llama.NewBatch(len(prompt)+1, 1)
	defer b.Close()
	for i, tok := range prompt {
		b.Add(tok, i, []int{0}, i == len(prompt)-1)
	}
	var out []llama.Token
	pos := len(prompt)
	for len(out) < n {
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		l, err := c.Logits(b.Len() - 1)
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range l {
			if v > l[best] {
				best = i
			}
		}
		if m.IsEOG(llama.Token(best)) {
			break
		}
		out = append(out, llama.Token(best))
		b.Clear()
		b.Add(llama.Token(best), pos, []int{0}, true)
		pos++
	}
	return out
}

func TestStoriesGreedy(t *testing.T) {
	dir := sharedModels(t)
	m, err := llama.LoadModel(filepath.Join(dir, "stories260K.gguf"), llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info := m.Info()
	if info.Architecture != "llama" || info.Layers != 5 || info.Vocab != 512 {
		t.Fatalf("stories260K info: %+v", info)
	}
	prompt, err := m.Tokenize("Once upon a time", true, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []llama.Token{1, 403, 407, 261, 378}
	if len(prompt) != len(want) {
		t.Fatalf("tokens %v, want %v", prompt, want)
	}
	for i := range want {
		if prompt[i] != want[i] {
			t.Fatalf("tokens %v, want %v", prompt, want)
		}
	}
	gen := greedy(t, m, prompt, 40)
	text, err := m.Detokenize(gen, false, false)
	if err != nil {
		t.Fatal(err)
	}
	const cont = ", there was a little girl named Lily. She loved to play outside in the park."
	t.Logf("greedy continuation: %q", text)
	if !strings.HasPrefix(text, cont) {
		t.Fatalf("greedy continuation %q, want it to start with %q", text, cont)
	}
}

func TestVocabTestVectors(t *testing.T) {
	dir := sharedModels(t)
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-gpt-2.gguf"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			m, err := llama.LoadModel(path, llama.ModelParams{VocabOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			inp, err := os.ReadFile(path + ".inp")
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(path + ".out")
			if err != nil {
				t.Fatal(err)
			}
			texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if texts[len(texts)-1] == "" {
				texts = texts[:len(texts)-1]
			}
			if len(texts) != len(lines) {
				t.Fatalf("%d test strings but %d lines of ids", len(texts), len(lines))
			}
			for i, text := range texts {
				got, err := m.Tokenize(text, false, false)
				if err != nil {
					t.Fatalf("case %d %q: %v", i, text, err)
				}
				var want []llama.Token
				for _, f := range strings.Fields(lines[i]) {
					n, err := strconv.Atoi(f)
					if err != nil {
						t.Fatalf("%s.out line %d: %v", name, i+1, err)
					}
					want = append(want, llama.Token(n))
				}
				if len(got) != len(want) {
					t.Errorf("case %d %q: got %v, want %v", i, text, got, want)
					continue
				}
				for j := range want {
					if got[j] != want[j] {
						t.Errorf("case %d %q: got %v, want %v", i, text, got, want)
						break
					}
				}
			}
			t.Logf("%d strings tokenized as llama.cpp's test vectors say", len(texts))
		})
	}
}

func TestPhi3ChatTemplate(t *testing.T) {
	dir := sharedModels(t)
	m, err := llama.LoadModel(filepath.Join(dir, "ggml-vocab-phi-3.gguf"), llama.ModelParams{VocabOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.ApplyChatTemplate("", []llama.Message{{"user", "What is 2+2?"}, {"assistant", "4"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>\n"
	if out != want {
		t.Fatalf("phi-3 template rendered %q, want %q", out, want)
	}
}

// TestReferenceBatchedSampled checks the sampled C loop the rollout
// benchmark compares against: the same seed gives the same draws, another
// seed others, and the sampled tokens' mean log-probability is that of draws
// from the model's softmax (below 0, above -log(vocab): a uniform
// distribution's, which a trained model's rows are far from).
func TestReferenceBatchedSampled(t *testing.T) {
	m, err := llama.LoadModel(filepath.Join(sharedModels(t), "stories260K.gguf"), llama.ModelParams{})
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
		n, lp, err := llama.ReferenceBatchedSampled(c, prompt, 4, 32, seed)
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
