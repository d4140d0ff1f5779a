package precheck

import (
	"fmt"
	"strings"
)

// The checks below mirror what llama.cpp asserts on (GGML_ASSERT, or a C++
// exception nothing catches) while it loads a model and tokenizes: the
// vocabulary (llama-vocab.cpp), the hyper-parameters (llama_model::
// load_hparams in llama-model.cpp and the graph builders in models/), and
// the norm weights' types (ggml's binary ops). Each error names the key or
// tensor.

// Token types (llama.h's llama_token_type).
const tokenTypeByte = 6

// Limits of llama-hparams.h.
const (
	llamaMaxLayers  = 512
	llamaMaxExperts = 1024
)

// checkVocab checks the tokenizer of a file that has a token list.
func checkVocab(h *Header) error {
	if _, ok := h.KV[tokenListKey]; !ok {
		return nil
	}
	model, _ := h.KV["tokenizer.ggml.model"].Val.(string)
	switch model {
	case "llama":
		// SentencePiece: text outside the vocabulary is spelled in byte
		// tokens, and llama.cpp's byte_to_token throws (an abort through
		// the C API) when one is missing: every byte needs "<0xXX>" or,
		// as llama.cpp falls back to, the one-byte text.
		have := make(map[string]bool, len(h.Tokens))
		for _, t := range h.Tokens {
			have[t] = true
		}
		for b := 0; b < 256; b++ {
			hex := fmt.Sprintf("<0x%02X>", b)
			if !have[hex] && (b == 0 || !have[string([]byte{byte(b)})]) {
				return fmt.Errorf("key %q: no token %s for byte 0x%02X, which the \"llama\" tokenizer needs for text outside its vocabulary", tokenListKey, hex, b)
			}
		}
		// A byte token's value is read from its text's characters 3 and 4.
		for i, typ := range h.TokenTypes {
			if typ == tokenTypeByte && i < len(h.Tokens) && !isByteTokenText(h.Tokens[i]) {
				return fmt.Errorf("key %q: token %d %q has type byte but is not of the form <0xXX>", tokenListKey, i, clipText(h.Tokens[i]))
			}
		}
	case "gpt2":
		if v, ok := h.KV["tokenizer.ggml.merges"]; !ok || v.Type != ggufArray {
			return fmt.Errorf("key \"tokenizer.ggml.merges\": missing, and the \"gpt2\" tokenizer needs it")
		}
	case "":
		return fmt.Errorf("key \"tokenizer.ggml.model\": missing, and the file has a token list")
	default:
		// bert (WPM) aborts on byte tokens, rwkv allocates without bound
		// on a bad token, none/no_vocab leave a vocabulary that asserts on
		// the first use, and the others are not what confclip trains.
		return fmt.Errorf("key \"tokenizer.ggml.model\" = %q: confclip reads only the \"llama\" (SentencePiece) and \"gpt2\" (BPE) tokenizers", clipText(model))
	}
	return nil
}

func isByteTokenText(s string) bool {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return false
	}
	for _, c := range s[3:5] {
		if !strings.ContainsRune("0123456789ABCDEFabcdef", c) {
			return false
		}
	}
	return true
}

// ropeEqualsHead are the architectures whose graphs assert that the rope
// dimension and the value head size equal the key head size (models/*.cpp:
// GGML_ASSERT(n_embd_head == n_rot)). TestRopeEqualsHeadMatchesTree reads it
// off the tree; re-read on llama.cpp 0c1e57098: 14 architectures new since
// ec98e2002 assert (cohere2moe to talkie below), and solar is gone.
var ropeEqualsHead = map[string]bool{
	"llama": true, "llama4": true, "deci": true, "falcon": true, "grok": true, "baichuan": true,
	"qwen2": true, "qwen2moe": true, "qwen2vl": true, "qwen3": true, "qwen3moe": true, "qwen3vl": true,
	"qwen3vlmoe": true, "plamo": true, "codeshell": true, "orion": true, "internlm2": true,
	"starcoder2": true, "xverse": true, "dbrx": true, "olmo": true, "olmo2": true, "olmoe": true,
	"arctic": true, "deepseek": true, "exaone": true, "exaone4": true, "granite": true, "granitemoe": true,
	"minicpm": true, "chameleon": true, "dots1": true, "arcee": true, "ernie4_5": true,
	"ernie4_5-moe": true, "hunyuan-moe": true, "hunyuan-dense": true, "smollm3": true, "dream": true,
	"smallthinker": true, "llada": true, "llada-moe": true, "seed_oss": true, "grovemoe": true,
	"apertus": true, "cogvlm": true, "rnd1": true, "pangu-embedded": true, "mistral3": true,
	"cohere2moe": true, "exaone-moe": true, "granite_swa": true, "graniteswitch": true, "hunyuan_vl": true,
	"hy_v3": true, "jais2": true, "llama-embed": true, "maincoder": true, "mellum": true, "paddleocr": true,
	"pockettts": true, "qwen3tts": true, "talkie": true,
}

// checkHparams checks a model's hyper-parameters as load_hparams and the
// graph builders assert on them. Adapters and files without an embedding
// length (vocab-only files) have none to check.
func checkHparams(h *Header) error {
	arch, _ := h.KV["general.architecture"].Val.(string)
	if arch == "" {
		return nil
	}
	if kind, _ := h.KV["general.type"].Val.(string); kind == "adapter" {
		return nil
	}
	key := func(k string) string { return arch + "." + k }
	u32 := func(k string) (uint64, bool) {
		v, ok := h.KV[key(k)]
		if !ok || v.Type != ggufU32 {
			return 0, false
		}
		return v.Val.(uint64), true
	}
	if s, ok := h.KV[key("rope.scaling.type")]; ok {
		switch s.Val {
		case "none", "linear", "yarn", "longrope":
		default:
			return fmt.Errorf("key %q = %q: llama.cpp knows none, linear, yarn and longrope", key("rope.scaling.type"), s.Val)
		}
	}
	nEmbd, ok := u32("embedding_length")
	if !ok {
		return nil
	}
	if n, _ := u32("block_count"); n > llamaMaxLayers {
		return fmt.Errorf("key %q = %d: llama.cpp loads at most %d layers", key("block_count"), n, llamaMaxLayers)
	}
	if err := checkExperts(key, u32); err != nil {
		return err
	}
	// The head size and rope dimension follow from the first layer's head
	// count (hparams.n_head()), as in load_hparams.
	nHead, ok := u32("attention.head_count")
	if !ok || nHead == 0 {
		return nil
	}
	headK, headV := nEmbd/nHead, nEmbd/nHead
	if v, ok := u32("attention.key_length"); ok {
		headK = v
	}
	if v, ok := u32("attention.value_length"); ok {
		headV = v
	}
	if headK == 0 {
		return fmt.Errorf("key %q: the key head size is 0 (%d embeddings over %d heads)", key("attention.key_length"), nEmbd, nHead)
	}
	if headV == 0 {
		return fmt.Errorf("key %q: the value head size is 0 (%d embeddings over %d heads)", key("attention.value_length"), nEmbd, nHead)
	}
	if nKV, ok := u32("attention.head_count_kv"); ok && (nKV == 0 || nHead%nKV != 0) {
		return fmt.Errorf("key %q = %d: must divide %q = %d", key("attention.head_count_kv"), nKV, key("attention.head_count"), nHead)
	}
	nRot := headK
	if v, ok := u32("rope.dimension_count"); ok {
		nRot = v
	}
	switch {
	case ropeEqualsHead[arch] && (nRot != headK || headV != headK):
		return fmt.Errorf("key %q = %d: llama.cpp's %s graph needs it equal to the key head size %d (and the value head size %d equal too)", key("rope.dimension_count"), nRot, arch, headK, headV)
	case nRot == 0 || nRot%2 != 0 || nRot > headK:
		return fmt.Errorf("key %q = %d: must be even, positive and at most the key head size %d", key("rope.dimension_count"), nRot, headK)
	}
	return nil
}

// checkExperts checks a mixture of experts' counts and groups as
// load_hparams asserts on them.
func checkExperts(key func(string) string, u32 func(string) (uint64, bool)) error {
	nExpert, _ := u32("expert_count")
	nUsed, _ := u32("expert_used_count")
	nGroups, _ := u32("expert_group_count")
	nGroupUsed, _ := u32("expert_group_used_count")
	switch {
	case nExpert > llamaMaxExperts:
		return fmt.Errorf("key %q = %d: llama.cpp allows at most %d", key("expert_count"), nExpert, llamaMaxExperts)
	case nUsed > nExpert:
		return fmt.Errorf("key %q = %d: more than %q = %d", key("expert_used_count"), nUsed, key("expert_count"), nExpert)
	case nExpert > 0 && nUsed == 0:
		return fmt.Errorf("key %q: missing or 0, and %q = %d", key("expert_used_count"), key("expert_count"), nExpert)
	case nExpert > 0 && nGroups >= nExpert:
		return fmt.Errorf("key %q = %d: must be less than %q = %d", key("expert_group_count"), nGroups, key("expert_count"), nExpert)
	case nExpert > 0 && nGroups > 1 && (nExpert%nGroups != 0 || nGroupUsed == 0 || nGroupUsed >= nGroups):
		return fmt.Errorf("key %q = %d, %q = %d: %q = %d must be a multiple of the groups, and the used groups between 1 and the groups", key("expert_group_count"), nGroups, key("expert_group_used_count"), nGroupUsed, key("expert_count"), nExpert)
	case nExpert == 0 && nGroups != 0:
		return fmt.Errorf("key %q = %d without experts", key("expert_group_count"), nGroups)
	}
	return nil
}

// checkNormTypes: ggml multiplies by the norm weights with F32 kernels only
// ("binary_op: unsupported types" otherwise).
func checkNormTypes(h *Header) error {
	for name, typ := range h.TensorTypes {
		if strings.Contains(name, "norm") && strings.HasSuffix(name, ".weight") && typ != 0 {
			return fmt.Errorf("tensor %q: type %s, llama.cpp needs norm weights in f32", name, h.types.Name(typ))
		}
	}
	return nil
}

// checkArchHparams checks what the graphs and loaders of particular
// architectures assert on beyond checkHparams (models/<arch>.cpp and the KV
// cache's layer reuse in llama-model.cpp), where llama.cpp would abort or
// divide by zero instead of returning an error.
func checkArchHparams(h *Header) error {
	arch, _ := h.KV["general.architecture"].Val.(string)
	if kind, _ := h.KV["general.type"].Val.(string); arch == "" || kind == "adapter" {
		return nil
	}
	if _, ok := h.KV[arch+".embedding_length"]; !ok {
		return nil // a vocabulary-only file
	}
	key := func(k string) string { return arch + "." + k }
	u32 := func(k string, def uint64) (uint64, bool) {
		v, ok := h.KV[key(k)]
		if !ok || v.Type != ggufU32 {
			return def, false
		}
		return v.Val.(uint64), true
	}
	nLayer, _ := u32("block_count", 0)
	switch arch {
	case "gemma4":
		return checkGemma4(h, key, u32, nLayer)
	case "nanbeige":
		// load_arch_hparams asserts both (GGML_ASSERT).
		loops, _ := u32("num_loops", 1)
		if loops == 0 {
			return fmt.Errorf("key %q = 0: llama.cpp's nanbeige loader asserts at least 1", key("num_loops"))
		}
		if nLayer*loops > llamaMaxLayers {
			return fmt.Errorf("key %q = %d: %d layers run %d times are more than the %d llama.cpp's nanbeige loader asserts", key("num_loops"), loops, nLayer, loops, llamaMaxLayers)
		}
	case "qwen35":
		return checkQwen35(h, key, u32)
	}
	return nil
}

// checkGemma4: llama_model_gemma4's load_arch_hparams and load_arch_tensors,
// its graph, and the KV cache's reuse of a layer's cache by the shared-KV
// layers (E2B and E4B), which asserts in every context llama.cpp creates.
func checkGemma4(h *Header, key func(string) string, u32 func(string, uint64) (uint64, bool), nLayer uint64) error {
	pattern, ok := h.KV[key("attention.sliding_window_pattern")]
	if !ok {
		return fmt.Errorf("key %q: missing, and llama.cpp's gemma4 loader needs it (which layers have a sliding window)", key("attention.sliding_window_pattern"))
	}
	for _, k := range []string{"attention.sliding_window", "embedding_length_per_layer_input", "attention.key_length_swa", "attention.value_length_swa"} {
		if _, ok := u32(k, 0); !ok {
			return fmt.Errorf("key %q: missing, and llama.cpp's gemma4 loader needs it", key(k))
		}
	}
	nEmbd, _ := u32("embedding_length", 0)
	def := uint64(0)
	if nHead, _ := u32("attention.head_count", 0); nHead > 0 {
		def = nEmbd / nHead
	}
	headK, _ := u32("attention.key_length", def)
	headV, _ := u32("attention.value_length", def)
	if headK != headV {
		return fmt.Errorf("key %q = %d: llama.cpp's gemma4 graph needs it equal to %q = %d", key("attention.value_length"), headV, key("attention.key_length"), headK)
	}
	swaK, _ := u32("attention.key_length_swa", 0)
	swaV, _ := u32("attention.value_length_swa", 0)
	if swaK == 0 || swaK != swaV {
		return fmt.Errorf("keys %q = %d and %q = %d: llama.cpp's gemma4 graph needs them equal and positive", key("attention.key_length_swa"), swaK, key("attention.value_length_swa"), swaV)
	}
	// The sliding layers' RoPE dimension defaults to the global layers'
	// (whose heads are wider): ggml's rope asserts that it fits the head.
	rot, _ := u32("rope.dimension_count", headK)
	rot, _ = u32("rope.dimension_count_swa", rot)
	if rot == 0 || rot%2 != 0 || rot > swaK {
		return fmt.Errorf("key %q = %d: must be even, positive and at most the sliding layers' head size %q = %d (without it, %q counts)", key("rope.dimension_count_swa"), rot, key("attention.key_length_swa"), swaK, key("rope.dimension_count"))
	}
	shared, _ := u32("attention.shared_kv_layers", 0)
	if shared >= nLayer || nLayer-shared < 2 {
		return fmt.Errorf("key %q = %d: of %d layers, at least 2 must keep their own KV cache (llama.cpp asserts it in every context)", key("attention.shared_kv_layers"), shared, nLayer)
	}
	if shared > 0 && pattern.Ints != nil {
		// A shared layer reads the cache of the last own-cache layer of its
		// kind: from-2 for a sliding one, from-1 for a global one.
		from := nLayer - shared
		swa := func(l uint64) bool { return l < uint64(len(pattern.Ints)) && pattern.Ints[l] != 0 }
		for l := from; l < nLayer; l++ {
			src := from - 1
			if swa(l) {
				src = from - 2
			}
			if swa(src) != swa(l) {
				return fmt.Errorf("key %q = %d: layer %d would reuse the KV cache of layer %d, which is of the other kind (sliding window or global) in %q (llama.cpp asserts)", key("attention.shared_kv_layers"), shared, l, src, key("attention.sliding_window_pattern"))
			}
		}
	}
	return nil
}

// checkQwen35: llama_model_qwen35's gated delta-net layers. The layer
// pattern divides by full_attention_interval, the graph asserts that the
// value heads are a multiple of the key heads, and the convolution's
// channels are the tensors' only if the inner size is the value heads'.
func checkQwen35(h *Header, key func(string) string, u32 func(string, uint64) (uint64, bool)) error {
	if _, ok := h.KV[key("attention.recurrent_layers")]; !ok {
		if n, _ := u32("full_attention_interval", 4); n == 0 {
			return fmt.Errorf("key %q = 0: llama.cpp divides by it", key("full_attention_interval"))
		}
	}
	for _, k := range []string{"ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"} {
		if n, ok := u32(k, 0); !ok || n == 0 {
			return fmt.Errorf("key %q: missing or 0, and llama.cpp's qwen35 layers need it", key(k))
		}
	}
	state, _ := u32("ssm.state_size", 0)
	vHeads, _ := u32("ssm.time_step_rank", 0)
	kHeads, _ := u32("ssm.group_count", 0)
	inner, _ := u32("ssm.inner_size", 0)
	if vHeads%kHeads != 0 {
		return fmt.Errorf("key %q = %d: llama.cpp's qwen35 graph asserts it is a multiple of %q = %d", key("ssm.time_step_rank"), vHeads, key("ssm.group_count"), kHeads)
	}
	if inner != state*vHeads {
		return fmt.Errorf("key %q = %d: must be %q x %q = %d", key("ssm.inner_size"), inner, key("ssm.state_size"), key("ssm.time_step_rank"), state*vHeads)
	}
	return nil
}
