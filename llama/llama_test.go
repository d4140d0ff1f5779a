package llama_test

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

func loadTiny(t testing.TB) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newCtx(t testing.TB, m *llama.Model, p llama.ContextParams) *llama.Context {
	t.Helper()
	c, err := llama.NewContext(m, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestTinyModelInfo(t *testing.T) {
	m := loadTiny(t)
	info := m.Info()
	tokens, _, _ := modelgen.Vocab(modelgen.Tiny())
	if info.Architecture != "llama" || info.Layers != 2 || info.Embd != 64 || info.Vocab != len(tokens) {
		t.Fatalf("info = %+v", info)
	}
	if info.BOS != 1 || info.EOS != 2 || info.FileType != "F32" || info.ChatTemplate != modelgen.ChatMLTemplate {
		t.Fatalf("info = %+v", info)
	}
	if !m.IsEOG(2) || m.IsEOG(300) {
		t.Fatal("EOS should end generation and a normal token should not")
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	m := loadTiny(t)
	for _, text := range []string{"What is 12+7? Answer: 19", "a", "x = (3*4) - 5.", "héllo ünïcode ✓"} {
		toks, err := m.Tokenize(text, true, false)
		if err != nil {
			t.Fatal(err)
		}
		if toks[0] != 1 {
			t.Fatalf("%q: no BOS: %v", text, toks)
		}
		// llama.cpp keeps the SentencePiece leading space when it drops BOS;
		// without BOS the text comes back exactly.
		got, err := m.Detokenize(toks[1:], false, false)
		if err != nil {
			t.Fatal(err)
		}
		if got != text {
			t.Fatalf("round trip of %q gave %q", text, got)
		}
		// Pieces are bytes; concatenated they give the text back even where
		// a character is split over byte tokens.
		var b bytes.Buffer
		for _, tok := range toks[1:] {
			p, err := m.TokenPiece(tok, false)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(p)
		}
		if strings.TrimPrefix(b.String(), " ") != text {
			t.Fatalf("pieces of %q joined to %q", text, b.String())
		}
	}
	if _, err := m.Tokenize("bad \xff utf8", true, false); !errors.Is(err, llama.ErrInvalidUTF8) {
		t.Fatalf("invalid UTF-8: err = %v", err)
	}
	if _, err := m.TokenPiece(99999, false); err == nil {
		t.Fatal("a token outside the vocabulary must be an error")
	}
}

func TestChatTemplate(t *testing.T) {
	m := loadTiny(t)
	out, err := m.ApplyChatTemplate("", []llama.Message{{"system", "be brief"}, {"user", "1+1?"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
	if out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	toks, err := m.Tokenize(out, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if toks[1] != 3 { // <|im_start|> parsed as its special token
		t.Fatalf("special tokens not parsed: %v", toks[:4])
	}
	if _, err := llama.ApplyChatTemplate("no such template {{", []llama.Message{{"user", "x"}}, true); err == nil {
		t.Fatal("an unknown template must be an error")
	}
}

// decodeOne decodes toks as one sequence and returns a copy of every row of logits.
func decodeOne(t testing.TB, c *llama.Context, toks []llama.Token, seq int) [][]float32 {
	t.Helper()
	b := llama.NewBatch(len(toks), 1)
	defer b.Close()
	for i, tok := range toks {
		if _, err := b.Add(tok, i, []int{seq}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, len(toks))
	for i := range toks {
		l, err := c.Logits(i)
		if err != nil {
			t.Fatal(err)
		}
		rows[i] = append([]float32(nil), l...)
	}
	return rows
}

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestDecodeBatchedEqualsSingle(t *testing.T) {
	m := loadTiny(t)
	toksA, _ := m.Tokenize("What is 2+3?", true, false)
	toksB, _ := m.Tokenize("Count: 1, 2, 3", true, false)

	single := newCtx(t, m, llama.ContextParams{NCtx: 256, NSeqMax: 2})
	rowsA := decodeOne(t, single, toksA, 0)
	single.ClearKV()
	rowsB := decodeOne(t, single, toksB, 0)
	for _, r := range rowsA {
		for _, v := range r {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatal("non-finite logit")
			}
		}
	}

	// Both sequences in one batch.
	c := newCtx(t, m, llama.ContextParams{NCtx: 256, NSeqMax: 2})
	b := llama.NewBatch(len(toksA)+len(toksB), 1)
	defer b.Close()
	for i, tok := range toksA {
		b.Add(tok, i, []int{0}, true)
	}
	for i, tok := range toksB {
		b.Add(tok, i, []int{1}, true)
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range toksA {
		l, _ := c.Logits(i)
		worst = math.Max(worst, maxDiff(l, rowsA[i]))
	}
	for i := range toksB {
		l, _ := c.Logits(len(toksA) + i)
		worst = math.Max(worst, maxDiff(l, rowsB[i]))
	}
	t.Logf("max |batched - single| logit difference: %.3g", worst)
	if worst > 1e-4 {
		t.Fatalf("batched logits differ from single-sequence logits by %g", worst)
	}
}

func TestSeqCopySharesPrompt(t *testing.T) {
	m := loadTiny(t)
	c := newCtx(t, m, llama.ContextParams{NCtx: 256, NSeqMax: 4})
	prompt, _ := m.Tokenize("12+7=", true, false)
	b := llama.NewBatch(64, 4)
	defer b.Close()
	// The prompt is decoded once, tagged with all four sequences.
	for i, tok := range prompt {
		b.Add(tok, i, []int{0, 1, 2, 3}, i == len(prompt)-1)
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	// Each sequence continues with its own token.
	b.Clear()
	next := []llama.Token{270, 271, 272, 273}
	for s, tok := range next {
		b.Add(tok, len(prompt), []int{s}, true)
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	for s, tok := range next {
		got, _ := c.Logits(s)
		got = append([]float32(nil), got...)
		ref := newCtx(t, m, llama.ContextParams{NCtx: 256})
		rows := decodeOne(t, ref, append(append([]llama.Token{}, prompt...), tok), 0)
		if d := maxDiff(got, rows[len(rows)-1]); d > 1e-4 {
			t.Fatalf("sequence %d: shared-prompt logits differ by %g", s, d)
		}
	}
	// Removing a sequence frees its cells; the others stay.
	if !c.SeqRemove(1, -1, -1) {
		t.Fatal("SeqRemove failed")
	}
	if c.SeqPosMax(1) != -1 || c.SeqPosMax(0) != len(prompt) {
		t.Fatalf("pos max after remove: seq1 %d seq0 %d", c.SeqPosMax(1), c.SeqPosMax(0))
	}
}

func TestDecodeBadInput(t *testing.T) {
	m := loadTiny(t)
	c := newCtx(t, m, llama.ContextParams{NCtx: 256, NBatch: 64, NSeqMax: 2})
	add := func(b *llama.Batch, tok llama.Token, pos, seq int) {
		if _, err := b.Add(tok, pos, []int{seq}, true); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		fill func(b *llama.Batch)
		want string
	}{
		{"token outside vocabulary", func(b *llama.Batch) { add(b, 100000, 0, 0) }, "outside the vocabulary"},
		{"negative token", func(b *llama.Batch) { add(b, -1, 0, 0) }, "outside the vocabulary"},
		{"position past the context", func(b *llama.Batch) { add(b, 5, 300, 0) }, "past the context"},
		{"sequence id out of range", func(b *llama.Batch) { add(b, 5, 0, 7) }, "sequence id"},
		{"prompt longer than the batch", func(b *llama.Batch) {
			for i := 0; i < 100; i++ {
				add(b, 5, i, 0)
			}
		}, "exceeds"},
		{"empty batch", func(b *llama.Batch) {}, "empty"},
	}
	for _, tc := range cases {
		b := llama.NewBatch(128, 1)
		tc.fill(b)
		err := c.Decode(b)
		b.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", tc.name, err, tc.want)
		}
	}
	// Decoding past the context: fill all 256 cells, then one more.
	c.ClearKV()
	b := llama.NewBatch(64, 1)
	defer b.Close()
	for p := 0; p < 256; p += 64 {
		b.Clear()
		for i := 0; i < 64; i++ {
			add(b, 5, p+i, 0)
		}
		if err := c.Decode(b); err != nil {
			t.Fatalf("filling the context at %d: %v", p, err)
		}
	}
	b.Clear()
	add(b, 5, 256, 0)
	if err := c.Decode(b); err == nil {
		t.Fatal("decoding past the context must be an error")
	}
	// A second sequence that does not fit in the full cache gets ErrNoKVSlot.
	b.Clear()
	add(b, 5, 0, 1)
	if err := c.Decode(b); !errors.Is(err, llama.ErrNoKVSlot) {
		t.Fatalf("full cache: err = %v, want ErrNoKVSlot", err)
	}
	if _, err := b.Add(5, 0, []int{0, 1}, false); err == nil {
		t.Fatal("a token in more sequences than the batch allows must be an error")
	}
}

// writeVariant writes a copy of the tiny model with one change.
func writeVariant(t *testing.T, name string, edit func(s *modelgen.Spec, w *llama.GGUFWriter) bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	s := modelgen.Tiny()
	tokens, scores, types := modelgen.Vocab(s)
	w := llama.NewGGUFWriter()
	defer w.Close()
	arch := "llama"
	w.SetString("general.architecture", arch)
	if !edit(&s, w) {
		w.SetString("general.architecture", arch)
	}
	w.SetUint32("llama.context_length", 256)
	w.SetUint32("llama.embedding_length", uint32(s.Embd))
	w.SetUint32("llama.block_count", uint32(s.Layers))
	w.SetUint32("llama.feed_forward_length", uint32(s.FF))
	w.SetUint32("llama.attention.head_count", uint32(s.Heads))
	w.SetUint32("llama.attention.head_count_kv", uint32(s.HeadsKV))
	w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5)
	w.SetString("tokenizer.ggml.model", "llama")
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	for _, ts := range modelgen.Tensors(s, len(tokens)) {
		if name == "missing-tensor.gguf" && ts.Name == "blk.1.ffn_up.weight" {
			continue
		}
		shape := ts.Shape
		if name == "wrong-shape.gguf" && ts.Name == "blk.0.attn_q.weight" {
			shape = []int64{shape[0], shape[1] / 2}
		}
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		w.AddTensorF32(ts.Name, shape, make([]float32, n))
	}
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBadModelFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	os.WriteFile(empty, nil, 0o644)
	notGGUF := filepath.Join(dir, "text.gguf")
	os.WriteFile(notGGUF, []byte("this is not a model\n"), 0o644)
	whole, _ := os.ReadFile(tinyPath)
	truncated := filepath.Join(dir, "truncated.gguf")
	os.WriteFile(truncated, whole[:len(whole)/2], 0o644)
	headerOnly := filepath.Join(dir, "header.gguf")
	os.WriteFile(headerOnly, whole[:24], 0o644)
	badArch := writeVariant(t, "bad-arch.gguf", func(s *modelgen.Spec, w *llama.GGUFWriter) bool {
		w.SetString("general.architecture", "no-such-arch")
		return true
	})
	missing := writeVariant(t, "missing-tensor.gguf", func(*modelgen.Spec, *llama.GGUFWriter) bool { return false })
	wrongShape := writeVariant(t, "wrong-shape.gguf", func(*modelgen.Spec, *llama.GGUFWriter) bool { return false })

	cases := []struct{ path, want string }{
		{filepath.Join(dir, "nope.gguf"), "no such file"},
		{dir, "is a directory"},
		{empty, "empty file"},
		{notGGUF, "not a GGUF file"},
		{truncated, "truncated"},
		{headerOnly, "not a valid GGUF"},
		{badArch, "no-such-arch"},
		{missing, "could not load"},
		{wrongShape, "could not load"},
	}
	for _, tc := range cases {
		_, err := llama.LoadModel(tc.path, llama.ModelParams{})
		if err == nil {
			t.Errorf("%s: loaded without error", tc.path)
			continue
		}
		if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %q, want the path and %q", tc.path, err, tc.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", tc.path, err)
		}
	}
}

func rssKB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("NOT RUN: no /proc/self/statm on this system")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.Atoi(f[1])
	return pages * os.Getpagesize() / 1024
}

func TestLoadCloseDoesNotLeak(t *testing.T) {
	load := func() {
		m, err := llama.LoadModel(tinyPath, llama.ModelParams{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := llama.NewContext(m, llama.ContextParams{NCtx: 256})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		m.Close()
	}
	for i := 0; i < 20; i++ { // warm up allocators
		load()
	}
	before := rssKB(t)
	for i := 0; i < 200; i++ {
		load()
	}
	after := rssKB(t)
	t.Logf("RSS before %d KiB, after 200 load/close cycles %d KiB", before, after)
	// One leaked model would be ~0.5 MiB; 200 of them 100 MiB.
	if after-before > 8*1024 {
		t.Fatalf("RSS grew by %d KiB over 200 load/close cycles", after-before)
	}
}

func TestGGUFReadBack(t *testing.T) {
	g, err := llama.OpenGGUF(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.String("general.architecture") != "llama" || g.Uint("llama.block_count", 0) != 2 {
		t.Fatalf("keys: arch %q blocks %d", g.String("general.architecture"), g.Uint("llama.block_count", 0))
	}
	v, _ := g.Get("tokenizer.ggml.tokens")
	tokens, _, _ := modelgen.Vocab(modelgen.Tiny())
	if v != llama.ArrayLen(len(tokens)) {
		t.Fatalf("tokens array length %v", v)
	}
	ts := g.Tensors()
	if len(ts) != len(modelgen.Tensors(modelgen.Tiny(), len(tokens))) || ts[0].Name != "token_embd.weight" || ts[0].Type != "f32" {
		t.Fatalf("tensors: %d, first %+v", len(ts), ts[0])
	}
}

// TestLibraryCommitIsPin: the libraries report the commit of the tree they
// were built from (scripts/llama-source.sh writes it into version.cmake,
// CMakeLists.txt compiles it into ggml_commit()), and a build from the pin
// (third_party/llama.cpp/.stamp starts with the pinned source) reports
// LlamaCommit. A build from another LLAMA_SOURCE must report something else
// than the pin unless that tree is the pinned commit.
func TestLibraryCommitIsPin(t *testing.T) {
	stamp, err := os.ReadFile(filepath.Join("..", "third_party", "llama.cpp", ".stamp"))
	if err != nil {
		t.Fatalf("the laid-down tree has no stamp: %v", err)
	}
	script, err := os.ReadFile(filepath.Join("..", "scripts", "llama-source.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PIN="([^"]+)"$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/llama-source.sh has no PIN= line")
	}
	got := llama.LibraryCommit()
	if !regexp.MustCompile(`^([0-9a-f]{9}|unknown)`).MatchString(got) {
		t.Fatalf("LibraryCommit() = %q, want a 9-digit commit or unknown", got)
	}
	if strings.HasPrefix(string(stamp), string(m[1])+" ") {
		if got != llama.LlamaCommit {
			t.Errorf("built from the pin, but the libraries report llama.cpp %q, LlamaCommit is %q", got, llama.LlamaCommit)
		}
	} else {
		t.Logf("built from another source (%.60s...): the libraries report %s", stamp, got)
	}
}
