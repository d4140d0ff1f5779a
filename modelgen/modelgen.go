// Package modelgen writes small, deterministic GGUF models that llama.cpp
// loads and runs: F32 weights from a seeded RNG, a SentencePiece-style
// vocabulary and a chat template, in one of several architectures (llama,
// qwen2, qwen3, gemma2, gemma3, gemma4, phi3, nanbeige, jais2, maincoder,
// and mistral-style GQA; qwen35 too, which confclip does not train) with
// each family's real metadata keys and tensor names. The tests use the tiny ones,
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
	// (gemma2, gemma3, gemma4); 0 = the architecture's default.
	SlidingWindow int
	// PerLayerEmbd is the size of gemma4's per-layer input embeddings (the
	// E2B and E4B models have 256; the 31B model none); 0 = none.
	PerLayerEmbd int
	// HeadDim is the key and value head size where it is not Embd/Heads
	// (Qwen3's 128 at embedding 1,024 and 16 heads; Gemma 3's 256); 0 =
	// Embd/Heads.
	HeadDim int
	// Tied: the output layer is the token embedding (no output.weight), as
	// in every small model of Shapes. gemma2 is always tied.
	Tied bool
	// RopeBase is the RoPE frequency base; 0 = the architecture's default.
	RopeBase float32
	// NormEps is the norms' epsilon; 0 = 1e-5.
	NormEps float32
	// Llama3Rope, when set, writes Llama 3.1's RoPE frequency factors
	// (rope_freqs.weight), as llama.cpp's converter does for a config's
	// rope_scaling of type llama3.
	Llama3Rope *Llama3Rope
	Seed       uint64
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

// Llama3Rope is a config's rope_scaling of type llama3: wavelengths longer
// than OrigCtx/LowFreq are stretched by Factor, those shorter than
// OrigCtx/HighFreq kept, and those between blended.
type Llama3Rope struct {
	Factor, LowFreq, HighFreq float64
	OrigCtx                   int
}

// factors are the per-pair divisors of the rotation frequencies, as
// llama.cpp's convert_hf_to_gguf.py computes them (LlamaModel's
// generate_extra_tensors), for head size hd and RoPE base.
func (r Llama3Rope) factors(hd int, base float64) []float32 {
	lowWave := float64(r.OrigCtx) / r.LowFreq
	highWave := float64(r.OrigCtx) / r.HighFreq
	out := make([]float32, hd/2)
	for i := range out {
		freq := 1 / math.Pow(base, float64(2*i)/float64(hd))
		wave := 2 * math.Pi / freq
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(r.Factor)
		default:
			smooth := (float64(r.OrigCtx)/wave - r.LowFreq) / (r.HighFreq - r.LowFreq)
			out[i] = float32(1 / ((1-smooth)/r.Factor + smooth))
		}
	}
	return out
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

// Archs are the architectures Write generates that confclip trains.
// "mistral" is Mistral's layout, which GGUF files store as the llama
// architecture: a llama with 4:1 grouped-query attention and a 1e6 RoPE
// base.
var Archs = []string{"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4", "phi3", "nanbeige", "jais2", "maincoder"}

// RecurrentArchs are the architectures Write generates that confclip
// cannot train: some of their layers keep a recurrent state (qwen35's
// gated delta-net layers), which has no backward pass in ggml, so training
// refuses them. They load and decode (rollouts, log-probs).
var RecurrentArchs = []string{"qwen35"}

// TinyArch is the tests' tiny model in the given architecture. Each one
// carries what is particular to its family: qwen2 biases on Q, K and V; qwen3
// RMS norms on Q and K; gemma2 soft-capping of the attention and final
// logits, a sliding window on every other layer, post-norms and GELU gating;
// gemma3 Q/K norms and a sliding window on five layers out of six (so it has
// six layers, one global); gemma4 a sliding window on two layers out of
// three, global layers with heads twice as wide (as Gemma 4's 512 against
// 256), an RMS norm on V and per-layer input embeddings; phi3 fused QKV and
// gate-up weights; nanbeige a llama with its own metadata; jais2 layer
// norms with biases, biases on every projection and a squared-ReLU MLP
// without a gate; maincoder Q/K norms; qwen35 a gated delta-net layer and a
// gated attention layer.
func TinyArch(arch string) (Spec, error) {
	s := Tiny()
	s.Arch = arch
	if arch != "llama" {
		s.Name = "confclip-tiny-" + arch
	}
	switch arch {
	case "llama", "qwen2", "qwen3", "phi3", "nanbeige", "jais2", "maincoder", "qwen35":
	case "mistral":
		s.HeadsKV = 1
	case "gemma2":
		s.SlidingWindow = 4
	case "gemma3":
		s.Layers = 6
		s.SlidingWindow = 4
	case "gemma4":
		s.Layers = 3
		s.SlidingWindow = 4
		// 32, not fewer: the per-layer block RMS-normalises a projection
		// of gelu(gate) * input, PerLayerEmbd wide; at 8 some token's
		// vector comes near zero, and the loss curves so sharply there
		// that the gradient checks' finite differences miss by 2-14%.
		s.PerLayerEmbd = 32
	default:
		return Spec{}, fmt.Errorf("modelgen: unknown architecture %q (want one of %v, or %v)", arch, Archs, RecurrentArchs)
	}
	return s, nil
}

// ropeBase is the spec's RoPE frequency base: RopeBase, or its family's.
func (s Spec) ropeBase() float32 {
	switch {
	case s.RopeBase != 0:
		return s.RopeBase
	case slices.Contains([]string{"mistral", "qwen2", "qwen3", "gemma3", "gemma4", "qwen35"}, s.Arch):
		return 1e6
	}
	return 10000
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

// gemma4Global says whether layer l of a gemma4 spec is a global
// (full-attention) layer: every third, the last among them, as Gemma 4's
// one in six ends the model.
func gemma4Global(l int) bool { return (l+1)%3 == 0 }

// globalHeadDim is the key and value head size of the full-attention
// layers: gemma4's are twice as wide as its sliding-window ones.
func (s Spec) globalHeadDim() int {
	if s.Arch == "gemma4" {
		return 2 * s.Embd / s.Heads
	}
	return s.plainHeadDim()
}

// plainHeadDim is the head size of every layer but gemma4's global ones.
func (s Spec) plainHeadDim() int {
	if s.HeadDim > 0 {
		return s.HeadDim
	}
	return s.Embd / s.Heads
}

// headDim is the key and value head size of layer l.
func (s Spec) headDim(l int) int {
	if s.Arch == "gemma4" && gemma4Global(l) {
		return s.globalHeadDim()
	}
	return s.plainHeadDim()
}

// qwen35's gated delta-net layers (ssm.*): key heads (group_count) of
// qwen35State values each, twice as many value heads (time_step_rank), and a
// causal convolution of qwen35Conv taps; every qwen35Interval-th layer is
// an attention layer.
const (
	qwen35State    = 16
	qwen35KHeads   = 2
	qwen35VHeads   = 4
	qwen35Conv     = 4
	qwen35Interval = 2
)

// Tensors lists the tensors of a spec's architecture, in file order, with
// llama.cpp's names (src/llama-arch.cpp) and shapes (src/models/*.cpp).
func Tensors(s Spec, nVocab int) []Tensor {
	e, v := int64(s.Embd), int64(nVocab)
	ts := []Tensor{{"token_embd.weight", []int64{e, v}}}
	if s.Arch == "gemma4" && s.PerLayerEmbd > 0 {
		p := int64(s.PerLayerEmbd)
		ts = append(ts, Tensor{"per_layer_token_embd.weight", []int64{p * int64(s.Layers), v}},
			Tensor{"per_layer_model_proj.weight", []int64{e, p * int64(s.Layers)}},
			Tensor{"per_layer_proj_norm.weight", []int64{p}})
	}
	if s.Arch == "gemma4" || s.Llama3Rope != nil {
		// RoPE frequency factors (gemma4's proportional ones for its global
		// layers; Llama 3's), one tensor for all layers.
		ts = append(ts, Tensor{"rope_freqs.weight", []int64{int64(s.globalHeadDim()) / 2}})
	}
	for l := 0; l < s.Layers; l++ {
		b := fmt.Sprintf("blk.%d.", l)
		add := func(name string, shape ...int64) { ts = append(ts, Tensor{b + name, shape}) }
		s.attnTensors(l, add)
		s.ffnTensors(add)
	}
	ts = append(ts, Tensor{"output_norm.weight", []int64{e}})
	if s.Arch == "jais2" {
		ts = append(ts, Tensor{"output_norm.bias", []int64{e}})
	}
	if s.Arch == "gemma2" || s.Tied { // gemma2 ties the output to the embedding
		return ts
	}
	return append(ts, Tensor{"output.weight", []int64{e, v}})
}

// attnTensors adds layer l's attention tensors (or, in qwen35's linear
// layers, its gated delta net's).
func (s Spec) attnTensors(l int, add func(name string, shape ...int64)) {
	e := int64(s.Embd)
	hd := int64(s.headDim(l))
	q, kv := hd*int64(s.Heads), hd*int64(s.HeadsKV)
	add("attn_norm.weight", e)
	if s.Arch == "jais2" {
		add("attn_norm.bias", e)
	}
	switch {
	case s.Arch == "qwen35" && (l+1)%qwen35Interval != 0: // gated delta net
		key, val := int64(qwen35State*qwen35KHeads), int64(qwen35State*qwen35VHeads)
		add("post_attention_norm.weight", e)
		add("attn_qkv.weight", e, 2*key+val)
		add("attn_gate.weight", e, val)
		add("ssm_conv1d.weight", qwen35Conv, 2*key+val)
		add("ssm_dt.bias", qwen35VHeads)
		add("ssm_a", qwen35VHeads)
		add("ssm_beta.weight", e, qwen35VHeads)
		add("ssm_alpha.weight", e, qwen35VHeads)
		add("ssm_norm.weight", qwen35State)
		add("ssm_out.weight", val, e)
	case s.Arch == "qwen35": // attention with an output gate in Q
		add("post_attention_norm.weight", e)
		add("attn_q.weight", e, 2*q)
		add("attn_k.weight", e, kv)
		add("attn_v.weight", e, kv)
		add("attn_output.weight", q, e)
		add("attn_q_norm.weight", hd)
		add("attn_k_norm.weight", hd)
	case s.Arch == "phi3":
		add("attn_qkv.weight", e, q+2*kv)
	default:
		add("attn_q.weight", e, q)
		add("attn_k.weight", e, kv)
		add("attn_v.weight", e, kv)
	}
	switch s.Arch {
	case "qwen2", "jais2":
		add("attn_q.bias", q)
		add("attn_k.bias", kv)
		add("attn_v.bias", kv)
	case "qwen3", "gemma3", "gemma4", "maincoder":
		add("attn_q_norm.weight", hd)
		add("attn_k_norm.weight", hd)
	}
	if s.Arch != "qwen35" {
		add("attn_output.weight", q, e)
	}
	if s.Arch == "jais2" {
		add("attn_output.bias", e)
	}
	if s.Arch == "gemma2" || s.Arch == "gemma3" || s.Arch == "gemma4" {
		add("post_attention_norm.weight", e)
	}
	if s.Arch == "gemma4" {
		add("layer_output_scale.weight", 1)
	}
}

// ffnTensors adds a layer's feed-forward tensors (and gemma4's per-layer
// input).
func (s Spec) ffnTensors(add func(name string, shape ...int64)) {
	e, ff := int64(s.Embd), int64(s.FF)
	if s.Arch != "qwen35" {
		add("ffn_norm.weight", e)
	}
	if s.Arch == "jais2" {
		add("ffn_norm.bias", e)
	}
	switch s.Arch {
	case "phi3":
		add("ffn_up.weight", e, 2*ff) // gate and up, fused
	case "jais2": // no gate
		add("ffn_up.weight", e, ff)
		add("ffn_up.bias", ff)
	default:
		add("ffn_gate.weight", e, ff)
		add("ffn_up.weight", e, ff)
	}
	add("ffn_down.weight", ff, e)
	if s.Arch == "jais2" {
		add("ffn_down.bias", e)
	}
	if s.Arch == "gemma2" || s.Arch == "gemma3" || s.Arch == "gemma4" {
		add("post_ffw_norm.weight", e)
	}
	if s.Arch == "gemma4" && s.PerLayerEmbd > 0 {
		add("inp_gate.weight", e, int64(s.PerLayerEmbd))
		add("proj.weight", int64(s.PerLayerEmbd), e)
		add("post_norm.weight", e)
	}
}

// Write generates the model and writes it to path.
func Write(path string, s Spec) error {
	if s.Arch == "" {
		s.Arch = "llama"
	}
	if !slices.Contains(Archs, s.Arch) && !slices.Contains(RecurrentArchs, s.Arch) {
		return fmt.Errorf("modelgen: unknown architecture %q (want one of %v, or %v)", s.Arch, Archs, RecurrentArchs)
	}
	if (s.HeadDim == 0 && s.Embd%s.Heads != 0) || s.Heads%s.HeadsKV != 0 {
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
	w.SetUint32(a+".rope.dimension_count", uint32(s.globalHeadDim()))
	eps := s.NormEps
	if eps == 0 {
		eps = 1e-5
	}
	if s.Arch == "jais2" { // layer norms, not RMS norms
		w.SetFloat32(a+".attention.layer_norm_epsilon", eps)
	} else {
		w.SetFloat32(a+".attention.layer_norm_rms_epsilon", eps)
	}
	w.SetFloat32(a+".rope.freq_base", s.ropeBase())
	if s.Arch == "phi3" {
		w.SetUint32(a+".rope.scaling.original_context_length", uint32(s.Ctx))
	}
	if s.HeadDim > 0 && s.HeadDim != s.Embd/s.Heads && s.Arch != "gemma3" && s.Arch != "qwen35" {
		w.SetUint32(a+".attention.key_length", uint32(s.HeadDim))
		w.SetUint32(a+".attention.value_length", uint32(s.HeadDim))
	}
	switch s.Arch {
	case "gemma2":
		w.SetUint32(a+".attention.key_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.value_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.sliding_window", uint32(s.SlidingWindow))
		w.SetFloat32(a+".attn_logit_softcapping", 50)
		w.SetFloat32(a+".final_logit_softcapping", 30)
	case "gemma3":
		w.SetUint32(a+".attention.key_length", uint32(s.plainHeadDim()))
		w.SetUint32(a+".attention.value_length", uint32(s.plainHeadDim()))
		w.SetUint32(a+".attention.sliding_window", uint32(s.SlidingWindow))
	case "gemma4":
		// The global layers' head size is the plain key; the sliding
		// layers' has its own keys, and their RoPE its own base.
		w.SetUint32(a+".attention.key_length", uint32(s.globalHeadDim()))
		w.SetUint32(a+".attention.value_length", uint32(s.globalHeadDim()))
		w.SetUint32(a+".attention.key_length_swa", uint32(s.headDim(0)))
		w.SetUint32(a+".attention.value_length_swa", uint32(s.headDim(0)))
		w.SetUint32(a+".rope.dimension_count_swa", uint32(s.headDim(0)))
		w.SetFloat32(a+".rope.freq_base_swa", 10000)
		w.SetUint32(a+".attention.sliding_window", uint32(s.SlidingWindow))
		pattern := make([]bool, s.Layers)
		for l := range pattern {
			pattern[l] = !gemma4Global(l)
		}
		w.SetBools(a+".attention.sliding_window_pattern", pattern)
		w.SetUint32(a+".embedding_length_per_layer_input", uint32(s.PerLayerEmbd))
		// No layer reuses another's KV cache (Gemma 4 E2B and E4B share
		// theirs in the last layers): a training graph has no cache to
		// share, and llama.cpp refuses to train such a model.
		w.SetUint32(a+".attention.shared_kv_layers", 0)
		w.SetFloat32(a+".final_logit_softcapping", 30)
	case "qwen35":
		w.SetUint32(a+".attention.key_length", uint32(s.Embd/s.Heads))
		w.SetUint32(a+".attention.value_length", uint32(s.Embd/s.Heads))
		// Interleaved M-RoPE over the text's positions: the sections of
		// the rotated pairs (Qwen 3.5's 11, 11, 10 of 32, scaled down).
		hd := int32(s.Embd / s.Heads)
		w.SetInt32s(a+".rope.dimension_sections", []int32{hd * 3 / 16, hd * 3 / 16, hd/2 - 2*(hd*3/16), 0})
		w.SetUint32(a+".ssm.conv_kernel", qwen35Conv)
		w.SetUint32(a+".ssm.state_size", qwen35State)
		w.SetUint32(a+".ssm.group_count", qwen35KHeads)
		w.SetUint32(a+".ssm.time_step_rank", qwen35VHeads)
		w.SetUint32(a+".ssm.inner_size", qwen35State*qwen35VHeads)
		w.SetUint32(a+".full_attention_interval", qwen35Interval)
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
			case t.Name == "rope_freqs.weight" && s.Llama3Rope != nil:
				data = s.Llama3Rope.factors(s.globalHeadDim(), float64(s.ropeBase()))
			case strings.HasSuffix(t.Name, ".ssm_a"): // A = -exp(A_log) < 0: the state decays
				for i := range data {
					data[i] = -1
				}
			case strings.HasSuffix(t.Name, ".bias"): // small, so that they matter but do not dominate
				for i := range data {
					data[i] = float32(rng.NormFloat64() * 0.1)
				}
			case len(t.Shape) == 1: // norms start at one
				v := float32(1)
				if s.Arch == "gemma4" && strings.HasSuffix(t.Name, ".attn_q_norm.weight") {
					// Gemma 4 scales attention by 1, leaving the size of
					// the logits to the Q and K norms: at one, the logits'
					// spread would be sqrt(head size) (4 and 5.7 here) and
					// the softmax near saturation. 1/sqrt(head size) on Q
					// gives the 1/sqrt(d) the other families apply.
					v = float32(1 / math.Sqrt(float64(t.Shape[0])))
				}
				for i := range data {
					data[i] = v
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
