// Package modelgen writes small, deterministic llama-architecture GGUF models
// that llama.cpp loads and runs: F32 weights from a seeded RNG, a
// SentencePiece-style vocabulary and a chat template. The tests use the tiny
// one, so that they need nothing outside the repository; the benchmarks use a
// larger one of about 100M parameters.
package modelgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/confclip/confclip/llama"
)

// Spec describes a model to generate.
type Spec struct {
	Name    string
	Embd    int // embedding size
	Layers  int
	Heads   int
	HeadsKV int
	FF      int // feed-forward size
	Ctx     int // training context
	Seed    uint64
	// Pieces are the normal vocabulary entries (without the "▁" word-start
	// marker, which Write adds as a second entry for each).
	Pieces []string
	// Words are extra whole-word pieces (written with the "▁" marker only).
	Words []string
	// ExtraVocab pads the vocabulary with synthetic pieces up to this many
	// entries in all (0 = no padding); the benchmark model uses it to get a
	// realistic vocabulary size.
	ExtraVocab int
	// Weights, when set, supplies tensor values instead of random ones (a
	// trained model); it is called with each tensor's name and size.
	Weights func(name string, n int) []float32
}

// ChatMLTemplate is the chat template written into generated models.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

// Chars are the single-character pieces of the tiny vocabulary: digits,
// arithmetic signs, letters, punctuation.
const Chars = "0123456789+-*/=()<>.,:;?!'\"#$%abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// Tiny is the tests' model: 2 layers, embedding 64, about 100K parameters.
func Tiny() Spec {
	p := make([]string, 0, len(Chars))
	for _, c := range Chars {
		p = append(p, string(c))
	}
	return Spec{Name: "confclip-tiny", Embd: 64, Layers: 2, Heads: 4, HeadsKV: 2, FF: 128, Ctx: 2048, Seed: 1, Pieces: p}
}

// Bench is the benchmarks' model: about 100M parameters with a 32,000-token
// vocabulary.
func Bench() Spec {
	s := Tiny()
	s.Name = "confclip-bench-100m"
	s.Embd, s.Layers, s.Heads, s.HeadsKV, s.FF, s.Ctx = 768, 8, 12, 4, 2048, 4096
	s.ExtraVocab = 32000
	return s
}

// Token types of llama.cpp's SentencePiece vocabulary.
const (
	typeNormal  = 1
	typeUnknown = 2
	typeControl = 3
	typeByte    = 6
)

// Vocab is the vocabulary Write produces for a spec: tokens, scores, types.
func Vocab(s Spec) (tokens []string, scores []float32, types []int32) {
	add := func(t string, score float32, typ int32) {
		tokens = append(tokens, t)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, typeUnknown)
	add("<s>", 0, typeControl)
	add("</s>", 0, typeControl)
	add("<|im_start|>", 0, typeControl)
	add("<|im_end|>", 0, typeControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, typeByte)
	}
	add("\u2581", -1, typeNormal)
	// Longer pieces score higher so that SentencePiece merges prefer them.
	for _, w := range s.Words {
		add("\u2581"+w, float32(len(w)), typeNormal)
	}
	for _, p := range s.Pieces {
		add(p, -2, typeNormal)
		add("\u2581"+p, -1.5, typeNormal)
	}
	for i := 0; len(tokens) < s.ExtraVocab; i++ {
		add(fmt.Sprintf("\u2581w%05d", i), -3, typeNormal)
	}
	return tokens, scores, types
}

// Tensor is one weight tensor's name and ggml shape.
type Tensor struct {
	Name  string
	Shape []int64
}

// Tensors lists the llama-architecture tensors of a spec, in file order.
func Tensors(s Spec, nVocab int) []Tensor {
	e, kv, ff, v := int64(s.Embd), int64(s.Embd/s.Heads*s.HeadsKV), int64(s.FF), int64(nVocab)
	ts := []Tensor{{"token_embd.weight", []int64{e, v}}}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			Tensor{b + "attn_norm.weight", []int64{e}},
			Tensor{b + "attn_q.weight", []int64{e, e}},
			Tensor{b + "attn_k.weight", []int64{e, kv}},
			Tensor{b + "attn_v.weight", []int64{e, kv}},
			Tensor{b + "attn_output.weight", []int64{e, e}},
			Tensor{b + "ffn_norm.weight", []int64{e}},
			Tensor{b + "ffn_gate.weight", []int64{e, ff}},
			Tensor{b + "ffn_up.weight", []int64{e, ff}},
			Tensor{b + "ffn_down.weight", []int64{ff, e}},
		)
	}
	return append(ts, Tensor{"output_norm.weight", []int64{e}}, Tensor{"output.weight", []int64{e, v}})
}

// Write generates the model and writes it to path.
func Write(path string, s Spec) error {
	if s.Embd%s.Heads != 0 || s.Heads%s.HeadsKV != 0 {
		return fmt.Errorf("modelgen: embedding %d, heads %d, kv heads %d do not divide", s.Embd, s.Heads, s.HeadsKV)
	}
	tokens, scores, types := Vocab(s)
	w := llama.NewGGUFWriter()
	defer w.Close()
	w.SetString("general.architecture", "llama")
	w.SetString("general.name", s.Name)
	w.SetUint32("general.file_type", 0) // all F32
	w.SetUint32("llama.context_length", uint32(s.Ctx))
	w.SetUint32("llama.embedding_length", uint32(s.Embd))
	w.SetUint32("llama.block_count", uint32(s.Layers))
	w.SetUint32("llama.feed_forward_length", uint32(s.FF))
	w.SetUint32("llama.attention.head_count", uint32(s.Heads))
	w.SetUint32("llama.attention.head_count_kv", uint32(s.HeadsKV))
	w.SetUint32("llama.rope.dimension_count", uint32(s.Embd/s.Heads))
	w.SetFloat32("llama.rope.freq_base", 10000)
	w.SetFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5)
	w.SetUint32("llama.vocab_size", uint32(len(tokens)))
	w.SetString("tokenizer.ggml.model", "llama")
	w.SetStrings("tokenizer.ggml.tokens", tokens)
	w.SetFloat32s("tokenizer.ggml.scores", scores)
	w.SetInt32s("tokenizer.ggml.token_type", types)
	w.SetUint32("tokenizer.ggml.unknown_token_id", 0)
	w.SetUint32("tokenizer.ggml.bos_token_id", 1)
	w.SetUint32("tokenizer.ggml.eos_token_id", 2)
	w.SetBool("tokenizer.ggml.add_bos_token", true)
	w.SetBool("tokenizer.ggml.add_eos_token", false)
	w.SetString("tokenizer.chat_template", ChatMLTemplate)

	rng := rand.New(rand.NewPCG(s.Seed, 0x636f6e66636c6970))
	for _, t := range Tensors(s, len(tokens)) {
		n := 1
		for _, d := range t.Shape {
			n *= int(d)
		}
		var data []float32
		if s.Weights != nil {
			data = s.Weights(t.Name, n)
		}
		if data == nil {
			data = make([]float32, n)
			if len(t.Shape) == 1 { // norms start at one
				for i := range data {
					data[i] = 1
				}
			} else { // scaled so that activations keep their size
				std := 1 / math.Sqrt(float64(t.Shape[0]))
				for i := range data {
					data[i] = float32(rng.NormFloat64() * std)
				}
			}
		}
		w.AddTensorF32(t.Name, t.Shape, data)
	}
	return w.WriteFile(path)
}

// BenchPath is where the benchmarks keep the generated benchmark model,
// relative to the repository root.
const BenchPath = "build/models/bench-100m.gguf"

// Cached writes the model to path unless a file is already there (a
// generated model is deterministic, so a file there is the same model).
func Cached(path string, s Spec) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := Write(tmp, s); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
