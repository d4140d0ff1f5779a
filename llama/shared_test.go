package llama_test

import (
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
