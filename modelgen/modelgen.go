// Package modelgen writes small, deterministic GGUF models that llama.cpp
// loads and runs: F32 weights from a seeded RNG, a SentencePiece-style
// vocabulary and a chat template, in one of several architectures (llama,
// qwen2, qwen3, gemma2, gemma3, phi3, and mistral-style GQA) with each
// family's real metadata keys and tensor names. The tests use the tiny ones,
// so that they need nothing outside the repository; the benchmarks use a
// larger llama of about 100M parameters.
package modelgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/confclip/confclip/llama"
)

// Spec describes a model to generate.
type Spec struct {
	// Arch is the GGUF architecture (general.architecture); empty = llama.
	// See Archs.
	Arch    string
	Name    string
	Embd    int // embedding size
	Layers  int
	Heads   int
	HeadsKV int
	FF      int // feed-forward size
	Ctx     int // training context
	// SlidingWindow is the window of the sliding-window attention layers
	// (gemma2, gemma3); 0 = the architecture's default.
	SlidingWindow int
	Seed          uint64
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
	if s.Arch == "phi3" {
		// llama.cpp sets attributes of Phi-3's special tokens by name when
		// the model's name says phi3, and expects this one to exist.
		add("<|endoftext|>", 0, typeControl)
	}
	return tokens, scores, types
}

// Archs are the architectures Write generates. "mistral" is Mistral's
// layout, which GGUF files store as the llama architecture: a llama with
// 4:1 grouped-query attention and a 1e6 RoPE base.
var Archs = []string{"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}

// TinyArch is the tests' tiny model in the given architecture. Each one
// carries what is particular to its family: qwen2 biases on Q, K and V; qwen3
// RMS norms on Q and K; gemma2 soft-capping of the attention and final
// logits, a sliding window on every other layer, post-norms and GELU gating;
// gemma3 Q/K norms and a sliding window on five layers out of six (so it has
// six layers, one global); phi3 fused QKV and gate-up weights.
func TinyArch(arch string) (Spec, error) {
	s := Tiny()
	s.Arch = arch
	if arch != "llama" {
		s.Name = "confclip-tiny-" + arch
	}
	switch arch {
	case "llama", "qwen2", "qwen3", "phi3":
	case "mistral":
		s.HeadsKV = 1
	case "gemma2":
		s.SlidingWindow = 4
	case "gemma3":
		s.Layers = 6
		s.SlidingWindow = 4
	default:
		return Spec{}, fmt.Errorf("modelgen: unknown architecture %q (want one of %v)", arch, Archs)
	}
	return s, nil
}

// ggufArch is the general.architecture a spec is written as.
func (s Spec) ggufArch() string {
	switch s.Arch {
	case "", "mistral":
		return "llama"
	}
	return s.Arch
}

// Tensor is one weight tensor's name and ggml shape.
type Tensor struct {
	Name  string
	Shape []int64
}

// Tensors lists the tensors of a spec's architecture, in file order, with
// llama.cpp's names (src/llama-arch.cpp) and shapes (src/llama-model.cpp).
func Tensors(s Spec, nVocab int) []Tensor {
	e, kv, ff, v := int64(s.Embd), int64(s.Embd/s.Heads*s.HeadsKV), int64(s.FF), int64(nVocab)
	hd := int64(s.Embd / s.Heads)
	ts := []Tensor{{"token_embd.weight", []int64{e, v}}}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		add := func(name string, shape ...int64) { ts = append(ts, Tensor{b + name, shape}) }
		add("attn_norm.weight", e)
		if s.Arch == "phi3" {
			add("attn_qkv.weight", e, e+2*kv)
		} else {
			add("attn_q.weight", e, e)
			add("attn_k.weight", e, kv)
			add("attn_v.weight", e, kv)
		}
		switch s.Arch {
		case "qwen2":
			add("attn_q.bias", e)
			add("attn_k.bias", kv)
			add("attn_v.bias", kv)
		case "qwen3", "gemma3":
			add("attn_q_norm.weight", hd)
			add("attn_k_norm.weight", hd)
		}
		add("attn_output.weight", e, e)
		if s.Arch == "gemma2" || s.Arch == "gemma3" {
			add("post_attention_norm.weight", e)
		}
		add("ffn_norm.weight", e)
		if s.Arch == "phi3" {
			add("ffn_up.weight", e, 2*ff) // gate and up, fused
		} else {
			add("ffn_gate.weight", e, ff)
			add("ffn_up.weight", e, ff)
		}
		add("ffn_down.weight", ff, e)
		if s.Arch == "gemma2" || s.Arch == "gemma3" {
			add("post_ffw_norm.weight", e)
		}
	}
	ts = append(ts, Tensor{"output_norm.weight", []int64{e}})
	if s.Arch == "gemma2" { // gemma2 ties the output to the embedding
		return ts
	}
	return append(ts, Tensor{"output.weight", []int64{e, v}})
}

// Write generates the model and writes it to path.
func Write(path string, s Spec) error {
	if s.Arch == "" {
		s.Arch = "llama"
	}
	if !slices.Contains(Archs, s.Arch) {
		return fmt.Errorf("modelgen: unknown architecture %q (want one of %v)", s.Arch, Archs)
	}
	if s.Embd%s.Heads != 0 || s.Heads%s.HeadsKV != 0 {
		return fmt.Errorf("modelgen: embedding %d, heads %d, kv heads %d do not divide", s.Embd, s.Heads, s.HeadsKV)
	}
	tokens, scores, types := Vocab(s)
	w := llama.NewGGUFWriter()
	defer w.Close()
	a := s.ggufArch()
	w.SetString("general.architecture", a)
	w.SetString("general.name", s.Name)
	w.SetUint32("general.file_type", 0) // all F32
	w.SetUint32(a+".context_length", uint32(s.Ctx))
	w.SetUint32(a+".embedding_length", uint32(s.Embd))
	w.SetUint32(a+".block_count", uint32(s.Layers))
	w.SetUint32(a+".feed_forward_length", uint32(s.FF))
	w.SetUint32(a+".attention.head_count", uint32(s.Heads))
	w.SetUint32(a+".attention.head_count_kv", uint32(s.HeadsKV))
	w.SetUint32(a+".rope.dimension_count", uint32(s.Embd/s.Heads))
	w.SetFloat32(a+".attention.layer_norm_rms_epsilon", 1e-5)
	switch s.Arch {
	case "llama":
		w.SetFloat32(a+".rope.freq_base", 10000)
	case "mistral", "qwen2", "qwen3", "gemma3":
		w.SetFloat32(a+".rope.freq_base", 1e6)
	case "phi3":
		w.SetFloat32(a+".rope.freq_base", 10000)
		w.SetUint32(a+".rope.scaling.original_context_length", uint32(s.Ctx))
	case "gemma2":
		w.SetFloat32(a+".rope.freq_base", 10000)
	}
	switch s.Arch {
	case "gemma2":
		w.SetUint32(a+".attention.key_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.value_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.sliding_window", uint32(s.SlidingWindow))
		w.SetFloat32(a+".attn_logit_softcapping", 50)
		w.SetFloat32(a+".final_logit_softcapping", 30)
	case "gemma3":
		w.SetUint32(a+".attention.key_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.value_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.sliding_window", uint32(s.SlidingWindow))
	}
	w.SetUint32(a+".vocab_size", uint32(len(tokens)))
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
			switch {
			case strings.HasSuffix(t.Name, ".bias"): // small, so that they matter but do not dominate
				for i := range data {
					data[i] = float32(rng.NormFloat64() * 0.1)
				}
			case len(t.Shape) == 1: // norms start at one
				for i := range data {
					data[i] = 1
				}
			default: // scaled so that activations keep their size
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
