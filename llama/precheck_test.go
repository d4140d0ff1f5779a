package llama_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// ggufKV is where one metadata pair sits in a GGUF file's bytes.
type ggufKV struct {
	key                       string
	keyOff, typeOff, valueOff int   // valueOff: the value, or an array's element type
	elems                     []int // offsets of a string array's elements (their lengths)
}

// ggufTensor is where one tensor-table entry sits.
type ggufTensor struct {
	name            string
	dimsOff, typOff int // dimsOff: the dimension count
}

// ggufLayout walks a well-formed GGUF file's header (test fixtures only:
// it trusts the file) and returns where its fields are, so that a test
// can corrupt one field at a time.
func ggufLayout(t testing.TB, b []byte) (kvs map[string]ggufKV, tensors []ggufTensor) {
	t.Helper()
	off := 8
	u32 := func() int { v := int(binary.LittleEndian.Uint32(b[off:])); off += 4; return v }
	u64 := func() int { v := int(binary.LittleEndian.Uint64(b[off:])); off += 8; return v }
	str := func() string { n := u64(); s := string(b[off : off+n]); off += n; return s }
	size := map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
	nt, nkv := u64(), u64()
	kvs = map[string]ggufKV{}
	for i := 0; i < nkv; i++ {
		kv := ggufKV{keyOff: off}
		kv.key = str()
		kv.typeOff = off
		typ := u32()
		kv.valueOff = off
		switch typ {
		case 8:
			str()
		case 9:
			et, n := u32(), u64()
			for j := 0; j < n; j++ {
				if et == 8 {
					kv.elems = append(kv.elems, off)
					str()
				} else {
					off += size[et]
				}
			}
		default:
			off += size[typ]
		}
		kvs[kv.key] = kv
	}
	for i := 0; i < nt; i++ {
		var ti ggufTensor
		ti.name = str()
		ti.dimsOff = off
		off += 8 * u32()
		ti.typOff = off
		off += 4 + 8
		tensors = append(tensors, ti)
	}
	return kvs, tensors
}

// mutation is one hostile change to a valid model, and the text its error
// must contain (it names the field).
type mutation struct {
	name, want string
	apply      func(t testing.TB, b []byte) []byte
}

func put32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }

// setU32 is the mutation that sets the file's 4-byte value of key to v (a
// u32 key, or an array's element type).
func setU32(key string, v uint32) func(testing.TB, []byte) []byte {
	return func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put32(b, kvs[key].valueOff, v)
		return b
	}
}
func put64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

// hostileCases are the crashes issue 13 found in mutants of a model (and a
// few neighbours): each must be a Go error naming the field.
var hostileCases = []mutation{
	{"tensor dimension 0", "dimension 0 is 0", func(t testing.TB, b []byte) []byte {
		_, ts := ggufLayout(t, b)
		put64(b, ts[0].dimsOff+4, 0)
		return b
	}},
	{"empty key", "empty key", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		kv := kvs["general.name"]
		// Length 0, the key's bytes become part of the next field: build the
		// file again with the key cut out.
		out := append([]byte{}, b[:kv.keyOff]...)
		out = binary.LittleEndian.AppendUint64(out, 0)
		return append(out, b[kv.typeOff:]...)
	}},
	{"key length 2^32", "past the end of the file", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put64(b, kvs["general.name"].keyOff, 1<<32)
		return b
	}},
	{"array count huge", "the file cannot hold", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put64(b, kvs["tokenizer.ggml.scores"].valueOff+4, 1<<40)
		return b
	}},
	{"no tokens", "no tokens", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		kv := kvs["tokenizer.ggml.tokens"]
		out := append([]byte{}, b[:kv.valueOff+4]...)
		out = binary.LittleEndian.AppendUint64(out, 0)
		end := kvs["tokenizer.ggml.scores"].keyOff
		for _, other := range kvs { // the pair written after the token list
			if other.keyOff > kv.keyOff && other.keyOff < end {
				end = other.keyOff
			}
		}
		return append(out, b[end:]...)
	}},
	{"known key with the wrong type", `"llama.context_length": type f32`, func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put32(b, kvs["llama.context_length"].typeOff, 6) // u32 -> f32, same size
		return b
	}},
	{"general.alignment not u32", `"general.alignment"`, func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		kv := kvs["general.file_type"] // u32: renamed to general.alignment with type i32
		name := "general.alignment"
		out := append([]byte{}, b[:kv.keyOff]...)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(name)))
		out = append(out, name...)
		out = binary.LittleEndian.AppendUint32(out, 5)
		return append(out, b[kv.valueOff:]...)
	}},
	{"duplicate token texts", "have the same text", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		el := kvs["tokenizer.ggml.tokens"].elems
		// Two tokens of the same length: the second takes the first's text.
		byLen := map[int]int{}
		for _, off := range el {
			n := int(binary.LittleEndian.Uint64(b[off:]))
			if first, ok := byLen[n]; ok && n > 0 {
				copy(b[off+8:off+8+n], b[first+8:first+8+n])
				return b
			}
			byLen[n] = off
		}
		t.Fatal("no two tokens of the same length")
		return nil
	}},
	{"NaN epsilon", `layer_norm_rms_epsilon" = NaN`, func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put32(b, kvs["llama.attention.layer_norm_rms_epsilon"].valueOff, math.Float32bits(float32(math.NaN())))
		return b
	}},
	{"negative epsilon", "must not be negative", func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put32(b, kvs["llama.attention.layer_norm_rms_epsilon"].valueOff, math.Float32bits(-1))
		return b
	}},
	{"infinite rope base", `"llama.rope.freq_base" = +Inf`, func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		put32(b, kvs["llama.rope.freq_base"].valueOff, math.Float32bits(float32(math.Inf(1))))
		return b
	}},
	{"zero heads", `"llama.attention.head_count" = 0`, setU32("llama.attention.head_count", 0)},
	{"overflowing element count", "element count overflows", func(t testing.TB, b []byte) []byte {
		_, ts := ggufLayout(t, b)
		put32(b, ts[0].dimsOff, 2)
		put64(b, ts[0].dimsOff+4, 1<<40)
		put64(b, ts[0].dimsOff+12, 1<<40)
		return b
	}},
	{"invalid tensor type", "invalid ggml type", func(t testing.TB, b []byte) []byte {
		_, ts := ggufLayout(t, b)
		put32(b, ts[0].typOff, 1000)
		return b
	}},
	{"scores shorter than tokens", `"tokenizer.ggml.scores"`, func(t testing.TB, b []byte) []byte {
		kvs, _ := ggufLayout(t, b)
		kv := kvs["tokenizer.ggml.scores"]
		n := binary.LittleEndian.Uint64(b[kv.valueOff+4:])
		// One value fewer: its 4 bytes are removed.
		put64(b, kv.valueOff+4, n-1)
		return append(b[:kv.valueOff+12:kv.valueOff+12], b[kv.valueOff+16:]...)
	}},
	{"truncated", "truncated", func(t testing.TB, b []byte) []byte {
		return b[:len(b)-100]
	}},

	// Issue 23: what llama.cpp reads differently from a plain Go reader,
	// and the values it asserts on.
	{"key with a NUL before the real one", `contains a NUL byte (llama.cpp would read it as "tokenizer.ggml.tokens")`, func(t testing.TB, b []byte) []byte {
		// strcmp finds this u32 first when llama.cpp asks for the tokens.
		return insertKV(t, b, tokenListKeyName, kvU32(tokenListKeyName+"\x00x", 7))
	}},
	{"tensor name with a NUL", "name contains a NUL byte", func(t testing.TB, b []byte) []byte {
		_, ts := ggufLayout(t, b)
		b[ts[1].dimsOff-2] = 0 // "blk.0.attn_norm.weight" -> "blk.0.attn_norm.wei\x00ht"
		return b
	}},
	{"no byte-fallback token", "no token <0xF0> for byte 0xF0", func(t testing.TB, b []byte) []byte {
		// The file still loads; the first prompt with a character outside
		// the vocabulary ("hello 😀") aborted in byte_to_token.
		i := bytes.Index(b, []byte("<0xF0>"))
		b[i+3] = 'Z'
		return b
	}},
	{"byte token not <0xXX>", "has type byte but is not of the form <0xXX>", func(t testing.TB, b []byte) []byte {
		// A normal token "a" becomes a byte token: token_to_byte reads
		// characters 3 and 4 of its text.
		kvs, _ := ggufLayout(t, b)
		for j, off := range kvs[tokenListKeyName].elems {
			if n := binary.LittleEndian.Uint64(b[off:]); n == 1 {
				put32(b, kvs["tokenizer.ggml.token_type"].valueOff+12+4*j, 6)
				return b
			}
		}
		t.Fatal("no one-byte token")
		return nil
	}},
	{"tokens equal up to a NUL", "have the same text", func(t testing.TB, b []byte) []byte {
		// A token whose prefix is another token: a NUL after the prefix
		// makes the two texts equal for llama.cpp (id_to_token.size() ==
		// token_to_id.size() asserts).
		kvs, _ := ggufLayout(t, b)
		texts := map[string]bool{}
		el := kvs[tokenListKeyName].elems
		text := func(off int) string {
			n := int(binary.LittleEndian.Uint64(b[off:]))
			return string(b[off+8 : off+8+n])
		}
		for _, off := range el {
			texts[text(off)] = true
		}
		for _, off := range el {
			s := text(off)
			for k := 1; k < len(s); k++ {
				if texts[s[:k]] {
					b[off+8+k] = 0
					return b
				}
			}
		}
		t.Fatal("no token with another token as its prefix")
		return nil
	}},
	{"tokenizer bert", `"tokenizer.ggml.model" = "bert"`, func(t testing.TB, b []byte) []byte {
		return setString(t, b, "tokenizer.ggml.model", "bert")
	}},
	{"tokenizer rwkv", `"tokenizer.ggml.model" = "rwkv"`, func(t testing.TB, b []byte) []byte {
		return setString(t, b, "tokenizer.ggml.model", "rwkv")
	}},
	{"tokenizer none", `"tokenizer.ggml.model" = "none"`, func(t testing.TB, b []byte) []byte {
		return setString(t, b, "tokenizer.ggml.model", "none")
	}},
	{"tokenizer with a NUL", `"tokenizer.ggml.model" = "bert"`, func(t testing.TB, b []byte) []byte {
		return setString(t, b, "tokenizer.ggml.model", "bert\x00llama")
	}},
	{"alignment 2", `"general.alignment" = 2`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("general.alignment", 2))
	}},
	{"unknown rope scaling", `"llama.rope.scaling.type" = "cubic"`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvString("llama.rope.scaling.type", "cubic"))
	}},
	{"empty rope scaling", `"llama.rope.scaling.type" = ""`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvString("llama.rope.scaling.type", ""))
	}},
	{"experts without used", `"llama.expert_used_count": missing or 0`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("llama.expert_count", 8))
	}},
	{"used experts more than experts", `"llama.expert_used_count" = 9: more than`, func(t testing.TB, b []byte) []byte {
		b = insertKV(t, b, "general.name", kvU32("llama.expert_count", 8))
		return insertKV(t, b, "general.name", kvU32("llama.expert_used_count", 9))
	}},
	{"experts 2^32-1", `"llama.expert_count" = 4294967295`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("llama.expert_count", math.MaxUint32))
	}},
	{"rope dimension 0", `"llama.rope.dimension_count" = 0`, setU32("llama.rope.dimension_count", 0)},
	{"key length 0", `"llama.attention.key_length": the key head size is 0`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("llama.attention.key_length", 0))
	}},
	{"kv heads not dividing heads", `"llama.attention.head_count_kv" = 3`, setU32("llama.attention.head_count_kv", 3)},
	{"adapter alpha 3e38", `"adapter.lora.alpha" = 3.0000000054977558e+38: at most 4096`, func(t testing.TB, b []byte) []byte {
		kv := binary.LittleEndian.AppendUint64(nil, uint64(len("adapter.lora.alpha")))
		kv = append(kv, "adapter.lora.alpha"...)
		kv = binary.LittleEndian.AppendUint32(kv, 6)
		kv = binary.LittleEndian.AppendUint32(kv, math.Float32bits(3e38))
		return insertKV(t, b, "general.name", kv)
	}},
	{"q8_1 weight", `"output.weight": type q8_1, which ggml cannot multiply by`, func(t testing.TB, b []byte) []byte {
		// The last tensor, so that its smaller data leaves every offset as
		// it was; llama_decode died on a null dot product (mutant 1275).
		_, ts := ggufLayout(t, b)
		put32(b, ts[len(ts)-1].typOff, 9)
		return b
	}},
	{"f16 norm weight", `"blk.0.attn_norm.weight": type f16`, func(t testing.TB, b []byte) []byte {
		// Twice the elements in f16: the same bytes, so the layout holds.
		_, ts := ggufLayout(t, b)
		ti := ts[1]
		put64(b, ti.dimsOff+4, 2*binary.LittleEndian.Uint64(b[ti.dimsOff+4:]))
		put32(b, ti.typOff, 1)
		return b
	}},
}

const tokenListKeyName = "tokenizer.ggml.tokens"

// kvU32 and kvString are one metadata pair's bytes.
func kvU32(key string, v uint32) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(key)))
	out = append(out, key...)
	out = binary.LittleEndian.AppendUint32(out, 4)
	return binary.LittleEndian.AppendUint32(out, v)
}

func kvString(key, v string) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(key)))
	out = append(out, key...)
	out = binary.LittleEndian.AppendUint32(out, 8)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(v)))
	return append(out, v...)
}

// insertKV puts a metadata pair before the key named before and counts it
// in the header. The tensor data moves with the header: a zero tail keeps
// the last tensor inside the file whatever the new padding.
func insertKV(t testing.TB, b []byte, before string, kv []byte) []byte {
	kvs, _ := ggufLayout(t, b)
	at := kvs[before].keyOff
	out := append(append(append([]byte{}, b[:at]...), kv...), b[at:]...)
	put64(out, 16, binary.LittleEndian.Uint64(out[16:])+1)
	return append(out, make([]byte, 64)...)
}

// setString replaces a string value (see insertKV for the tail).
func setString(t testing.TB, b []byte, key, v string) []byte {
	kvs, _ := ggufLayout(t, b)
	kv := kvs[key]
	n := int(binary.LittleEndian.Uint64(b[kv.valueOff:]))
	out := binary.LittleEndian.AppendUint64(append([]byte{}, b[:kv.valueOff]...), uint64(len(v)))
	out = append(append(out, v...), b[kv.valueOff+8+n:]...)
	return append(out, make([]byte, 64)...)
}

// TestPrecheckRejectsHostileFiles checks that every crash of issue 13 is a
// Go error naming the field, and that llama.cpp is never asked to load the
// file (OpenGGUF and LoadModel run the pre-check first).
func TestPrecheckRejectsHostileFiles(t *testing.T) {
	orig, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := llama.PrecheckGGUF(tinyPath); err != nil {
		t.Fatalf("the valid tiny model: %v", err)
	}
	dir := t.TempDir()
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			b := c.apply(t, bytes.Clone(orig))
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".gguf")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			err := llama.PrecheckGGUF(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("pre-check: got %v, want an error naming %s and containing %q", err, path, c.want)
			}
			_, err = llama.LoadModel(path, llama.ModelParams{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadModel: got %v, want the pre-check's error", err)
			}
		})
	}
}

// TestPrecheckAcceptsRealFiles: every shared model and vocabulary file
// passes (a pre-check that rejected real files would be useless).
func TestPrecheckAcceptsRealFiles(t *testing.T) {
	dir := sharedModels(t)
	files, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	if len(files) == 0 {
		t.Fatalf("no GGUF files in %s", dir)
	}
	files = append(files, tinyPath)
	for _, arch := range append(slices.Clone(modelgen.Archs), modelgen.RecurrentArchs...) {
		spec, err := modelgen.TinyArch(arch)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), arch+".gguf")
		if err := modelgen.Write(path, spec); err != nil {
			t.Fatal(err)
		}
		files = append(files, path)
	}
	for _, f := range files {
		if err := llama.PrecheckGGUF(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// archCases are hyper-parameters of the architectures new in llama.cpp
// 0c1e57098 on which llama.cpp aborts (GGML_ASSERT, a division by zero)
// where the pre-check must refuse the file, each applied to the
// architecture's tiny model (modelgen.TinyArch).
var archCases = []struct {
	arch string
	mutation
}{
	// Gemma 4's tiny model: 3 layers, sliding, sliding, global; heads of
	// 16 on the sliding layers and 32 on the global one.
	{"gemma4", mutation{"two of three layers share their KV cache", `"gemma4.attention.shared_kv_layers" = 2: of 3 layers, at least 2`, setU32("gemma4.attention.shared_kv_layers", 2)}},
	{"gemma4", mutation{"shared KV across kinds", "layer 2 would reuse the KV cache of layer 1, which is of the other kind", setU32("gemma4.attention.shared_kv_layers", 1)}},
	{"gemma4", mutation{"sliding RoPE wider than the head", `"gemma4.rope.dimension_count_swa" = 32: must be even, positive and at most`, setU32("gemma4.rope.dimension_count_swa", 32)}},
	{"gemma4", mutation{"sliding key and value heads differ", `"gemma4.attention.value_length_swa" = 8: llama.cpp's gemma4 graph needs them equal`, setU32("gemma4.attention.value_length_swa", 8)}},
	{"gemma4", mutation{"layer pattern of the wrong type", `"gemma4.attention.sliding_window_pattern": type array of i8`, setU32("gemma4.attention.sliding_window_pattern", 1)}}, // bool -> i8, the same size
	{"nanbeige", mutation{"zero loops", `"nanbeige.num_loops" = 0`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("nanbeige.num_loops", 0))
	}}},
	{"nanbeige", mutation{"loops past the layer limit", `"nanbeige.num_loops" = 300: 2 layers run 300 times`, func(t testing.TB, b []byte) []byte {
		return insertKV(t, b, "general.name", kvU32("nanbeige.num_loops", 300))
	}}},
	{"jais2", mutation{"partial RoPE", `"jais2.rope.dimension_count" = 8: llama.cpp's jais2 graph needs it equal`, setU32("jais2.rope.dimension_count", 8)}},
	{"maincoder", mutation{"partial RoPE", `"maincoder.rope.dimension_count" = 8: llama.cpp's maincoder graph needs it equal`, setU32("maincoder.rope.dimension_count", 8)}},
	{"qwen35", mutation{"attention interval 0", `"qwen35.full_attention_interval" = 0: llama.cpp divides by it`, setU32("qwen35.full_attention_interval", 0)}},
	{"qwen35", mutation{"value heads not a multiple of key heads", `"qwen35.ssm.time_step_rank" = 3: llama.cpp's qwen35 graph asserts`, setU32("qwen35.ssm.time_step_rank", 3)}},
	{"qwen35", mutation{"inner size not the value heads'", `"qwen35.ssm.inner_size" = 32: must be`, setU32("qwen35.ssm.inner_size", 32)}},
	{"qwen35", mutation{"no key groups", `"qwen35.ssm.group_count": missing or 0`, setU32("qwen35.ssm.group_count", 0)}},
}

// TestPrecheckArchHparams: each archCases file is refused by the pre-check
// with its reason, and LoadModel returns that error without asking
// llama.cpp; the unchanged tiny model of each architecture passes.
func TestPrecheckArchHparams(t *testing.T) {
	dir := t.TempDir()
	orig := map[string][]byte{}
	for _, c := range archCases {
		if orig[c.arch] != nil {
			continue
		}
		spec, err := modelgen.TinyArch(c.arch)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, c.arch+".gguf")
		if err := modelgen.Write(path, spec); err != nil {
			t.Fatal(err)
		}
		if err := llama.PrecheckGGUF(path); err != nil {
			t.Fatalf("the valid %s model: %v", c.arch, err)
		}
		if orig[c.arch], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range archCases {
		t.Run(c.arch+"/"+c.name, func(t *testing.T) {
			b := c.apply(t, bytes.Clone(orig[c.arch]))
			path := filepath.Join(dir, c.arch+"-"+strings.ReplaceAll(c.name, " ", "-")+".gguf")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			err := llama.PrecheckGGUF(path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("pre-check: got %v, want an error containing %q", err, c.want)
			}
			if _, err := llama.LoadModel(path, llama.ModelParams{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadModel: got %v, want the pre-check's error", err)
			}
		})
	}
}

// TestPrecheckMemoryBounded: a key claiming 4 GiB in a small file is
// refused before anything that size is allocated.
func TestPrecheckMemoryBounded(t *testing.T) {
	orig, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	kvs, _ := ggufLayout(t, orig)
	b := bytes.Clone(orig)
	put64(b, kvs["general.name"].keyOff, 1<<32)
	path := filepath.Join(t.TempDir(), "big-key.gguf")
	os.WriteFile(path, b, 0o644)
	allocs := testing.AllocsPerRun(1, func() { llama.PrecheckGGUF(path) })
	var before, after runtimeMem
	before.read()
	err = llama.PrecheckGGUF(path)
	after.read()
	if err == nil {
		t.Fatal("accepted a key of 4 GiB")
	}
	if grown := after.total - before.total; grown > 4*uint64(len(b))+1<<20 {
		t.Fatalf("the pre-check allocated %d bytes for a %d-byte file (%v allocations)", grown, len(b), allocs)
	}
}

// loadChildEnv makes the test binary a child that loads one model and
// exits (see TestMain): the fuzz test runs llama.cpp there, so a crash is
// a signal the parent sees rather than the end of the fuzzing process.
const loadChildEnv = "CONFCLIP_TEST_LOAD_MODEL"

// loadChild loads path through llama.cpp, as LoadModel does after the
// pre-check, and returns the exit status: 0 loaded, 1 a Go error.
func loadChild(path string) int {
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer m.Close()
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, NBatch: 64, Threads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	// One decode: an epsilon llama.cpp asserts on is only read then. The
	// prompt has characters outside any test vocabulary: SentencePiece
	// spells them in byte tokens, which a file may lack.
	toks, err := m.Tokenize("a b\nhello 😀 é", true, false)
	if err != nil || len(toks) == 0 {
		return 1
	}
	b := llama.NewBatch(len(toks), 1)
	defer b.Close()
	for i, tok := range toks {
		if tok < 0 || int(tok) >= m.NVocab() {
			return 1
		}
		if _, err := b.Add(tok, i, []int{0}, i == len(toks)-1); err != nil {
			return 1
		}
	}
	if err := c.Decode(b); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// childLoads remembers, by the header's hash, what a child said: the
// fuzzer's mutations of tensor data do not change how a file loads.
var childLoads sync.Map

// loadInChild loads path in a child process and fails t when the child
// died from a signal or hung.
func loadInChild(t *testing.T, path string, header []byte) {
	key := sha256.Sum256(header)
	if _, seen := childLoads.Load(key); seen {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadChildEnv+"="+path)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	hung := !timer.Stop()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws, _ := ee.Sys().(syscall.WaitStatus)
		switch {
		case hung:
			t.Fatalf("llama.cpp hung loading a file the pre-check accepted:\n%s", tail(out.String()))
		case ws.Signaled():
			t.Fatalf("llama.cpp died (%v) loading a file the pre-check accepted:\n%s", ws.Signal(), tail(out.String()))
		case ee.ExitCode() != 1:
			// A signal or abort in C code reaches the Go runtime, which
			// prints it and exits 2; loadChild itself exits 0 or 1.
			t.Fatalf("llama.cpp crashed (exit %d) loading a file the pre-check accepted:\n%s", ee.ExitCode(), tail(out.String()))
		}
	} else if err != nil {
		t.Fatal(err)
	}
	childLoads.Store(key, true)
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// FuzzPrecheckGGUF mutates the tiny model (seeded with issue 13's crash
// cases): the pre-check must never panic, and whatever it accepts must load
// through llama.cpp in a child process without a signal.
func FuzzPrecheckGGUF(f *testing.F) {
	// A smaller model than the tests' keeps every execution (and the
	// fuzzer's minimising) fast: the header is what matters.
	micro := filepath.Join(f.TempDir(), "micro.gguf")
	spec := modelgen.Tiny()
	spec.Name, spec.Embd, spec.Layers, spec.Heads, spec.HeadsKV, spec.FF, spec.Ctx = "micro", 8, 1, 2, 1, 8, 64
	spec.Pieces = spec.Pieces[:12]
	if err := modelgen.Write(micro, spec); err != nil {
		f.Fatal(err)
	}
	orig, err := os.ReadFile(micro)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(orig)
	for _, c := range hostileCases {
		f.Add(c.apply(f, bytes.Clone(orig)))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, fmt.Sprintf("fuzz-%x.gguf", sha256.Sum256(b)))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		if llama.PrecheckGGUF(path) != nil {
			return
		}
		// The header is what the loader reads before the data; the data's
		// start is bounded by the file.
		h := b
		if end := llama.GGUFDataOffset(path); end > 0 && end <= int64(len(b)) {
			h = b[:end]
		}
		loadInChild(t, path, h)
	})
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	m.total = st.TotalAlloc
}

// TestWriteGGUFDiskFull: a GGUF larger than the free space of its disk is
// refused before writing, with a message that says so (llama.cpp's writer
// said only "unexpected fwrite number of bytes written").
func TestWriteGGUFDiskFull(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	err := llama.CheckSpace(dir, free+1<<30)
	if err == nil || !strings.Contains(err.Error(), "too full") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("got %v, want the disk named too full", err)
	}
	if err := llama.CheckSpace(dir, 1); err != nil {
		t.Fatalf("one byte: %v", err)
	}
}

// TestLoadErrorGivesTheReason: a file the pre-check accepts and llama.cpp
// refuses (a tensor missing) says llama.cpp's reason without --verbose,
// not only "failed to load model".
func TestLoadErrorGivesTheReason(t *testing.T) {
	b, err := os.ReadFile(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(b, []byte("output_norm.weight")) != 1 {
		t.Fatal("the tiny model has no single output_norm.weight")
	}
	b = bytes.Replace(b, []byte("output_norm.weight"), []byte("output_norm.weigha"), 1)
	path := filepath.Join(t.TempDir(), "missing-tensor.gguf")
	os.WriteFile(path, b, 0o644)
	_, err = llama.LoadModel(path, llama.ModelParams{})
	if err == nil || !strings.Contains(err.Error(), "tensor 'output_norm.weight' not found") {
		t.Fatalf("got %v, want llama.cpp's reason", err)
	}
}

// TestWriteGGUFOutputs: a GGUF output (an adapter, a generated model) is
// written as every output is (internal/atomicfile): through a symlink to
// its target, through /dev/null without replacing it, and a killed
// write's leftover is removed.
func TestWriteGGUFOutputs(t *testing.T) {
	dir := t.TempDir()
	spec := modelgen.Tiny()
	target := filepath.Join(dir, "target.gguf")
	link := filepath.Join(dir, "link.gguf")
	os.Symlink("target.gguf", link)
	leftover := filepath.Join(dir, ".target.gguf.tmp-12345")
	os.WriteFile(leftover, []byte("half"), 0o600)
	if err := modelgen.Write(link, spec); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v", err)
	}
	if err := llama.PrecheckGGUF(target); err != nil {
		t.Fatalf("the link's target: %v", err)
	}
	if _, err := os.Stat(leftover); err == nil {
		t.Fatal("a killed write's leftover is still there")
	}
	if err := modelgen.Write(os.DevNull, spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(os.DevNull); st.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s is now %v", os.DevNull, st.Mode())
	}
}
