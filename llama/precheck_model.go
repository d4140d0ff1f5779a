package llama

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
	llamaMaxExperts = 512
)

// checkVocab checks the tokenizer of a file that has a token list.
func checkVocab(h *ggufHeader) error {
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
// GGML_ASSERT(n_embd_head == hparams.n_rot)). TestRopeEqualsHeadMatchesTree
// reads it off the tree: granitemoe and minicpm are built by granite's
// builder; nemotron's and minimax-m2's assertions are commented out.
var ropeEqualsHead = map[string]bool{
	"llama": true, "llama4": true, "deci": true, "falcon": true, "grok": true, "baichuan": true,
	"qwen2": true, "qwen2moe": true, "qwen2vl": true, "qwen3": true, "qwen3moe": true, "qwen3vl": true,
	"qwen3vlmoe": true, "plamo": true, "codeshell": true, "orion": true, "internlm2": true,
	"starcoder2": true, "xverse": true, "dbrx": true, "olmo": true, "olmo2": true, "olmoe": true,
	"arctic": true, "deepseek": true, "exaone": true, "exaone4": true, "granite": true, "granitemoe": true,
	"minicpm": true, "chameleon": true, "solar": true, "dots1": true, "arcee": true, "ernie4_5": true,
	"ernie4_5-moe": true, "hunyuan-moe": true, "hunyuan-dense": true, "smollm3": true, "dream": true,
	"smallthinker": true, "llada": true, "llada-moe": true, "seed_oss": true, "grovemoe": true,
	"apertus": true, "cogvlm": true, "rnd1": true, "pangu-embedded": true, "mistral3": true,
}

// checkHparams checks a model's hyper-parameters as load_hparams and the
// graph builders assert on them. Adapters and files without an embedding
// length (vocab-only files) have none to check.
func checkHparams(h *ggufHeader) error {
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

// checkNormTypes: ggml multiplies by the norm weights with F32 kernels only
// ("binary_op: unsupported types" otherwise).
func checkNormTypes(h *ggufHeader) error {
	for name, typ := range h.TensorTypes {
		if strings.Contains(name, "norm") && strings.HasSuffix(name, ".weight") && typ != 0 {
			return fmt.Errorf("tensor %q: type %s, llama.cpp needs norm weights in f32", name, ggmlTypeName(typ))
		}
	}
	return nil
}
