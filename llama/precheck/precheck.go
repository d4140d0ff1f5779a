// Package precheck reads a GGUF file's header in Go before llama.cpp sees
// it, and rejects what would make ggml's or llama.cpp's loader crash or
// allocate without bound (llama.LoadModel, OpenGGUF and the adapter loader
// run it first). It holds no cgo: what it needs of ggml's tensor types
// (their names, block and type sizes, whether the CPU backend can multiply
// by one) the caller gives as Types.
package precheck

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strings"
)

// GGUF value types (gguf.h's enum gguf_type).
const (
	ggufU8 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
	ggufTypeCount
)

var ggufTypeNames = [ggufTypeCount]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

// ggufTypeSize is the byte size of a fixed-size value type (0 for string
// and array).
var ggufTypeSize = [ggufTypeCount]uint64{1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}

func ggufTypeName(t uint32) string {
	if t < ggufTypeCount {
		return ggufTypeNames[t]
	}
	return fmt.Sprintf("type %d", t)
}

// Value is one metadata value as the pre-check keeps it: scalars by
// value, arrays by element type and length only (their elements are read
// and dropped, so memory stays small whatever the file says).
type Value struct {
	Type    uint32 // ggufArray for arrays
	ArrType uint32 // element type of an array
	N       uint64 // array length
	Val     any    // scalar: uint64, int64, float64, bool or string
	// Ints are the elements of an integer or bool array of at most
	// llamaMaxLayers elements (per-layer hyper-parameters such as gemma4's
	// sliding_window_pattern); nil for any other array.
	Ints []int64
}

func (v Value) typeName() string {
	if v.Type == ggufArray {
		return "array of " + ggufTypeName(v.ArrType)
	}
	return ggufTypeName(v.Type)
}

// Header is what Read read from a file's header.
type Header struct {
	Version uint32
	KV      map[string]Value
	Tensors int
	// DataStart is where the tensor data starts and DataEnd where the last
	// tensor's data ends, from the file's start.
	DataStart, DataEnd uint64
	// Tokens are the token texts as llama.cpp keeps them (cut at the first
	// NUL, an empty one named [EMPTY_i]); TokenTypes the token_type array.
	Tokens     []string
	TokenTypes []int32
	// TensorTypes maps each tensor's name to its ggml type.
	TensorTypes map[string]uint32

	types Types // the checks name tensor types through it
}

// ggufLimits of the format that ggml enforces (GGML_MAX_DIMS, GGML_MAX_NAME).
const (
	ggufMaxDims = 4
	ggufMaxName = 64
	ggufVersion = 3
)

// Types is what the pre-check needs to know of ggml's tensor types (the
// caller asks ggml: llama's ggmlTypes).
type Types interface {
	// Known reports whether t is a ggml type (below GGML_TYPE_COUNT, with
	// a block size).
	Known(t uint32) bool
	// CanMultiply reports whether the CPU backend has a dot product for
	// weights of type t.
	CanMultiply(t uint32) bool
	// BlockSize and TypeSize are the elements of a block and its bytes.
	BlockSize(t uint32) uint64
	TypeSize(t uint32) uint64
	// Name is ggml's name of a known type.
	Name(t uint32) string
}

// ggufReader reads little-endian values, refusing any read that would go
// past the file's size before allocating for it.
type ggufReader struct {
	r    *bufio.Reader
	off  uint64
	size uint64
}

func (r *ggufReader) left() uint64 { return r.size - r.off }

func (r *ggufReader) bytes(n uint64, what string) ([]byte, error) {
	if n > r.left() {
		return nil, fmt.Errorf("%s: %d bytes at offset %d, past the end of the file (%d bytes)", what, n, r.off, r.size)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	r.off += n
	return b, nil
}

func (r *ggufReader) skip(n uint64, what string) error {
	if n > r.left() {
		return fmt.Errorf("%s: %d bytes at offset %d, past the end of the file (%d bytes)", what, n, r.off, r.size)
	}
	if _, err := r.r.Discard(int(n)); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	r.off += n
	return nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	b, err := r.bytes(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	b, err := r.bytes(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *ggufReader) str(what string) (string, error) {
	n, err := r.u64(what + " length")
	if err != nil {
		return "", err
	}
	b, err := r.bytes(n, what)
	return string(b), err
}

// scalar reads one fixed-size or string value of type t.
func (r *ggufReader) scalar(t uint32, what string) (any, error) {
	if t == ggufString {
		return r.str(what)
	}
	b, err := r.bytes(ggufTypeSize[t], what)
	if err != nil {
		return nil, err
	}
	switch t {
	case ggufU8:
		return uint64(b[0]), nil
	case ggufI8:
		return int64(int8(b[0])), nil
	case ggufU16:
		return uint64(binary.LittleEndian.Uint16(b)), nil
	case ggufI16:
		return int64(int16(binary.LittleEndian.Uint16(b))), nil
	case ggufU32:
		return uint64(binary.LittleEndian.Uint32(b)), nil
	case ggufI32:
		return int64(int32(binary.LittleEndian.Uint32(b))), nil
	case ggufF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), nil
	case ggufBool:
		return b[0] != 0, nil
	case ggufU64:
		return binary.LittleEndian.Uint64(b), nil
	case ggufI64:
		return int64(binary.LittleEndian.Uint64(b)), nil
	case ggufF64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	}
	return nil, fmt.Errorf("%s: invalid type %d", what, t)
}

// tokenListKey is read element by element: the duplicate check needs the
// texts (llama.cpp asserts that every token text is unique).
const (
	tokenListKey = "tokenizer.ggml.tokens"
	tokenTypeKey = "tokenizer.ggml.token_type"
)

// maxLoraAlpha bounds an adapter's alpha (real ones are 1 to a few
// hundred; alpha 2*rank at rank 1024 is 2048).
const maxLoraAlpha = 4096

// tensorAlignment is ggml's TENSOR_ALIGNMENT (ggml-impl.h).
const tensorAlignment = 32

// cutNUL is s up to its first NUL byte, as C reads it.
func cutNUL(s string) string {
	s, _, _ = strings.Cut(s, "\x00")
	return s
}

// precheckGGUF checks a GGUF stream of the given size (see PrecheckGGUF).
// Read reads a GGUF file's header from rd, a file of size bytes, and
// checks it: lengths and counts larger than the file, empty or repeated
// keys, invalid types, zero or overflowing tensor dimensions, tensor data
// beyond the end of the file, keys that llama.cpp reads with the wrong
// type, duplicate token texts and non-finite or impossible
// hyper-parameters. Every error names the field; one that begins
// "truncated" or "not a GGUF" says the file is not whole or not GGUF.
// Memory use is bounded by the file's size: no length in the file is
// trusted before the bytes behind it are known to exist.
func Read(rd io.Reader, size int64, types Types) (*Header, error) {
	if size < 0 {
		return nil, fmt.Errorf("negative size")
	}
	r := &ggufReader{r: bufio.NewReaderSize(rd, 64<<10), size: uint64(size)}
	magic, err := r.bytes(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != "GGUF" {
		return nil, fmt.Errorf("not a GGUF file (bad magic)")
	}
	h := &Header{KV: map[string]Value{}, types: types}
	if h.Version, err = r.u32("version"); err != nil {
		return nil, err
	}
	if h.Version < 2 || h.Version > ggufVersion {
		return nil, fmt.Errorf("GGUF version %d: only versions 2 and 3 are read", h.Version)
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64("metadata key count")
	if err != nil {
		return nil, err
	}
	// A key takes at least 8+1+4 bytes and a tensor 8+1+4+8+4+8: counts
	// beyond what the file can hold are rejected before anything is sized
	// by them.
	if nKV > r.left()/13 {
		return nil, fmt.Errorf("metadata key count %d: the file cannot hold that many", nKV)
	}
	if nTensors > r.left()/33 {
		return nil, fmt.Errorf("tensor count %d: the file cannot hold that many", nTensors)
	}

	var tokens map[string]uint64 // text -> first index
	for i := uint64(0); i < nKV; i++ {
		key, err := r.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("metadata key %d: empty key", i)
		}
		// ggml compares keys with strcmp: "a\x00b" would be found as "a"
		// with a type the pre-check never saw.
		if cut, _, found := strings.Cut(key, "\x00"); found {
			return nil, fmt.Errorf("metadata key %d %q: contains a NUL byte (llama.cpp would read it as %q)", i, key, cut)
		}
		if _, dup := h.KV[key]; dup {
			return nil, fmt.Errorf("metadata key %q: appears twice", key)
		}
		t, err := r.u32(fmt.Sprintf("key %q: type", key))
		if err != nil {
			return nil, err
		}
		if t >= ggufTypeCount {
			return nil, fmt.Errorf("key %q: invalid value type %d", key, t)
		}
		v := Value{Type: t}
		if t != ggufArray {
			if v.Val, err = r.scalar(t, fmt.Sprintf("key %q: value", key)); err != nil {
				return nil, err
			}
			if str, ok := v.Val.(string); ok {
				v.Val = cutNUL(str) // llama.cpp reads strings as C strings
			}
			h.KV[key] = v
			continue
		}
		if v.ArrType, err = r.u32(fmt.Sprintf("key %q: array element type", key)); err != nil {
			return nil, err
		}
		if v.ArrType >= ggufTypeCount || v.ArrType == ggufArray {
			return nil, fmt.Errorf("key %q: invalid array element type %s", key, ggufTypeName(v.ArrType))
		}
		if v.N, err = r.u64(fmt.Sprintf("key %q: array length", key)); err != nil {
			return nil, err
		}
		if v.ArrType == ggufString {
			// Each string is at least its 8-byte length.
			if v.N > r.left()/8 {
				return nil, fmt.Errorf("key %q: array length %d: the file cannot hold that many strings", key, v.N)
			}
			isTokens := key == tokenListKey
			if isTokens {
				tokens = make(map[string]uint64, v.N)
				h.Tokens = make([]string, 0, v.N)
			}
			for j := uint64(0); j < v.N; j++ {
				what := fmt.Sprintf("key %q: element %d", key, j)
				if !isTokens {
					n, err := r.u64(what + " length")
					if err != nil {
						return nil, err
					}
					if err := r.skip(n, what); err != nil {
						return nil, err
					}
					continue
				}
				s, err := r.str(what)
				if err != nil {
					return nil, err
				}
				// llama.cpp keeps a token's text up to its first NUL and
				// asserts that the texts it kept are unique.
				s = cutNUL(s)
				if s == "" { // llama.cpp names an empty token this way
					s = fmt.Sprintf("[EMPTY_%d]", j)
				}
				if first, dup := tokens[s]; dup {
					return nil, fmt.Errorf("key %q: tokens %d and %d have the same text %q (llama.cpp reads a text up to its first NUL byte)", key, first, j, clipText(s))
				}
				tokens[s] = j
				h.Tokens = append(h.Tokens, s)
			}
		} else {
			es := ggufTypeSize[v.ArrType]
			if v.N > r.left()/es {
				return nil, fmt.Errorf("key %q: array length %d: the file cannot hold %d values of %d bytes", key, v.N, v.N, es)
			}
			what := fmt.Sprintf("key %q: array data", key)
			if key == tokenTypeKey && es == 4 {
				// Kept: the byte tokens' texts are checked against them.
				b, err := r.bytes(v.N*es, what)
				if err != nil {
					return nil, err
				}
				h.TokenTypes = make([]int32, v.N)
				for j := range h.TokenTypes {
					h.TokenTypes[j] = int32(binary.LittleEndian.Uint32(b[4*j:]))
				}
			} else if isIntElem(v.ArrType) && v.N <= llamaMaxLayers {
				b, err := r.bytes(v.N*es, what)
				if err != nil {
					return nil, err
				}
				v.Ints = make([]int64, v.N)
				for j := range v.Ints {
					v.Ints[j] = intElem(b[uint64(j)*es:], v.ArrType)
				}
			} else if err := r.skip(v.N*es, what); err != nil {
				return nil, err
			}
		}
		h.KV[key] = v
	}

	align := uint64(32) // GGUF_DEFAULT_ALIGNMENT
	if v, ok := h.KV["general.alignment"]; ok {
		if v.Type != ggufU32 {
			return nil, fmt.Errorf("key \"general.alignment\": type %s, want u32", v.typeName())
		}
		align = v.Val.(uint64)
		if align == 0 || align&(align-1) != 0 {
			return nil, fmt.Errorf("key \"general.alignment\" = %d: not a power of 2", align)
		}
		// ggml's CPU buffers assert that tensor data is 32-byte aligned
		// (TENSOR_ALIGNMENT), whatever the file's own alignment.
		if align%tensorAlignment != 0 {
			return nil, fmt.Errorf("key \"general.alignment\" = %d: llama.cpp needs a multiple of %d", align, tensorAlignment)
		}
	}

	h.TensorTypes = make(map[string]uint32, nTensors)
	var dataSize, dataEnd uint64 // relative to the data section
	for i := uint64(0); i < nTensors; i++ {
		name, err := r.str(fmt.Sprintf("tensor %d: name", i))
		if err != nil {
			return nil, err
		}
		if len(name) >= ggufMaxName {
			return nil, fmt.Errorf("tensor %d: name of %d bytes, the limit is %d", i, len(name), ggufMaxName-1)
		}
		if cut, _, found := strings.Cut(name, "\x00"); found {
			return nil, fmt.Errorf("tensor %d %q: name contains a NUL byte (ggml would name it %q)", i, name, cut)
		}
		if _, dup := h.TensorTypes[name]; dup {
			return nil, fmt.Errorf("tensor %q: appears twice", name)
		}
		nDims, err := r.u32(fmt.Sprintf("tensor %q: dimension count", name))
		if err != nil {
			return nil, err
		}
		if nDims > ggufMaxDims {
			return nil, fmt.Errorf("tensor %q: %d dimensions, at most %d", name, nDims, ggufMaxDims)
		}
		ne := [ggufMaxDims]uint64{1, 1, 1, 1}
		elems := uint64(1)
		for j := uint32(0); j < nDims; j++ {
			if ne[j], err = r.u64(fmt.Sprintf("tensor %q: dimension %d", name, j)); err != nil {
				return nil, err
			}
			if ne[j] == 0 {
				return nil, fmt.Errorf("tensor %q: dimension %d is 0", name, j)
			}
			if ne[j] > math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q: dimension %d is negative", name, j)
			}
			hi, lo := bits.Mul64(elems, ne[j])
			if hi != 0 || lo >= math.MaxInt64 {
				return nil, fmt.Errorf("tensor %q: shape %v: the element count overflows", name, ne[:nDims])
			}
			elems = lo
		}
		typ, err := r.u32(fmt.Sprintf("tensor %q: type", name))
		if err != nil {
			return nil, err
		}
		if !types.Known(typ) {
			return nil, fmt.Errorf("tensor %q: invalid ggml type %d", name, typ)
		}
		if !types.CanMultiply(typ) {
			return nil, fmt.Errorf("tensor %q: type %s, which ggml cannot multiply by (not a weight type)", name, types.Name(typ))
		}
		h.TensorTypes[name] = typ
		blck, tsize := types.BlockSize(typ), types.TypeSize(typ)
		if ne[0]%blck != 0 {
			return nil, fmt.Errorf("tensor %q: %d elements per row, not a multiple of %s's block size %d", name, ne[0], types.Name(typ), blck)
		}
		off, err := r.u64(fmt.Sprintf("tensor %q: data offset", name))
		if err != nil {
			return nil, err
		}
		if off != dataSize {
			return nil, fmt.Errorf("tensor %q: data offset %d, expected %d", name, off, dataSize)
		}
		hi, nbytes := bits.Mul64(elems/blck, tsize)
		if hi != 0 || nbytes > uint64(size) {
			return nil, fmt.Errorf("tensor %q: shape %v of %s needs more bytes than the file has", name, ne[:nDims], types.Name(typ))
		}
		dataEnd = off + nbytes
		padded := (nbytes + align - 1) &^ (align - 1)
		if dataSize += padded; dataSize > uint64(size) {
			return nil, fmt.Errorf("tensor %q: data ends past the end of the file (%d bytes)", name, size)
		}
	}
	h.Tensors = int(nTensors)
	dataStart := (r.off + align - 1) &^ (align - 1)
	h.DataStart = dataStart
	if nTensors > 0 {
		h.DataEnd = dataStart + dataEnd
		if h.DataEnd > uint64(size) {
			return nil, fmt.Errorf("truncated: tensor data needs %d bytes, the file has %d", h.DataEnd, size)
		}
	}
	for _, check := range []func(*Header) error{checkKnownKeys, checkVocab, checkHparams, checkArchHparams, checkNormTypes} {
		if err := check(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// isIntElem says whether an array element type is an integer or bool.
func isIntElem(t uint32) bool {
	switch t {
	case ggufU8, ggufI8, ggufU16, ggufI16, ggufU32, ggufI32, ggufU64, ggufI64, ggufBool:
		return true
	}
	return false
}

// intElem is the integer or bool element of type t at the start of b.
func intElem(b []byte, t uint32) int64 {
	switch t {
	case ggufU8, ggufBool:
		return int64(b[0])
	case ggufI8:
		return int64(int8(b[0]))
	case ggufU16:
		return int64(binary.LittleEndian.Uint16(b))
	case ggufI16:
		return int64(int16(binary.LittleEndian.Uint16(b)))
	case ggufU32:
		return int64(binary.LittleEndian.Uint32(b))
	case ggufI32:
		return int64(int32(binary.LittleEndian.Uint32(b)))
	}
	return int64(binary.LittleEndian.Uint64(b))
}

// clipText shortens a token text for an error message.
func clipText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// keyRule is the type llama.cpp reads a key with. ggufArray rules give the
// element types allowed; arrOrScalar keys may be a scalar of Type or an
// array of the element types.
type keyRule struct {
	types    []uint32 // allowed scalar types (nil: must be an array)
	elems    []uint32 // allowed array element types (nil: must be a scalar)
	positive bool     // a number that must be > 0
}

var (
	u32Only   = []uint32{ggufU32}
	intElems  = []uint32{ggufU32, ggufI32}
	byteElems = []uint32{ggufU8, ggufI8}
	strOnly   = []uint32{ggufString}
	f32Only   = []uint32{ggufF32}
	boolOnly  = []uint32{ggufBool}
	// patternElems: llama.cpp reads a layer pattern as int32 from bool,
	// u32 or i32 elements.
	patternElems = []uint32{ggufBool, ggufU32, ggufI32}
)

// generalRules are keys outside the architecture's namespace that
// llama.cpp reads directly (some with ggml's asserting getters).
var generalRules = map[string]keyRule{
	"general.architecture":                    {types: strOnly},
	"general.file_type":                       {types: u32Only},
	"tokenizer.ggml.model":                    {types: strOnly},
	"tokenizer.ggml.pre":                      {types: strOnly},
	"tokenizer.ggml.tokens":                   {elems: strOnly},
	"tokenizer.ggml.scores":                   {elems: f32Only},
	"tokenizer.ggml.token_type":               {elems: intElems}, // read as int32
	"tokenizer.ggml.merges":                   {elems: strOnly},
	"tokenizer.ggml.precompiled_charsmap":     {elems: byteElems}, // read as bytes
	"tokenizer.ggml.bos_token_id":             {types: u32Only},
	"tokenizer.ggml.eos_token_id":             {types: u32Only},
	"tokenizer.ggml.eot_token_id":             {types: u32Only},
	"tokenizer.ggml.eom_token_id":             {types: u32Only},
	"tokenizer.ggml.unknown_token_id":         {types: u32Only},
	"tokenizer.ggml.seperator_token_id":       {types: u32Only},
	"tokenizer.ggml.padding_token_id":         {types: u32Only},
	"tokenizer.ggml.mask_token_id":            {types: u32Only},
	"tokenizer.ggml.add_bos_token":            {types: boolOnly},
	"tokenizer.ggml.add_eos_token":            {types: boolOnly},
	"tokenizer.ggml.add_space_prefix":         {types: boolOnly},
	"tokenizer.ggml.remove_extra_whitespaces": {types: boolOnly},
	"tokenizer.chat_template":                 {types: strOnly},
	"adapter.type":                            {types: strOnly},
	"adapter.lora.alpha":                      {types: f32Only},
}

// archRules are keys under "<architecture>." that llama.cpp reads.
var archRules = map[string]keyRule{
	"context_length":                   {types: u32Only, positive: true},
	"embedding_length":                 {types: u32Only, positive: true},
	"block_count":                      {types: u32Only, positive: true},
	"vocab_size":                       {types: u32Only, positive: true},
	"feed_forward_length":              {types: u32Only, elems: intElems},
	"attention.head_count":             {types: u32Only, elems: intElems, positive: true},
	"attention.head_count_kv":          {types: u32Only, elems: intElems},
	"attention.key_length":             {types: u32Only},
	"attention.value_length":           {types: u32Only},
	"rope.dimension_count":             {types: u32Only},
	"rope.dimension_sections":          {elems: intElems},
	"rope.freq_base":                   {types: f32Only},
	"rope.scaling.factor":              {types: f32Only},
	"attention.layer_norm_epsilon":     {types: f32Only},
	"attention.layer_norm_rms_epsilon": {types: f32Only},
	"expert_count":                     {types: u32Only},
	"expert_used_count":                {types: u32Only},
	"attention.sliding_window":         {types: u32Only},
	"attention.sliding_window_pattern": {elems: patternElems},
	"attention.shared_kv_layers":       {types: u32Only},
	"attention.key_length_swa":         {types: u32Only},
	"attention.value_length_swa":       {types: u32Only},
	"rope.dimension_count_swa":         {types: u32Only},
	"rope.freq_base_swa":               {types: f32Only},
	"embedding_length_per_layer_input": {types: u32Only},
	"final_logit_softcapping":          {types: f32Only},
	"num_loops":                        {types: u32Only},
	"full_attention_interval":          {types: u32Only},
	"ssm.conv_kernel":                  {types: u32Only},
	"ssm.inner_size":                   {types: u32Only},
	"ssm.state_size":                   {types: u32Only},
	"ssm.time_step_rank":               {types: u32Only},
	"ssm.group_count":                  {types: u32Only},
	"xielu.alpha_n":                    {types: f32Only, elems: f32Only},
	"xielu.alpha_p":                    {types: f32Only, elems: f32Only},
	"xielu.beta":                       {types: f32Only, elems: f32Only},
	"xielu.eps":                        {types: f32Only, elems: f32Only},
}

// checkKnownKeys checks the types of the keys llama.cpp reads, the token
// list's companions, and that every hyper-parameter is a finite number
// (an epsilon also not negative).
func checkKnownKeys(h *Header) error {
	check := func(key string, rule keyRule, v Value) error {
		if v.Type == ggufArray {
			for _, t := range rule.elems {
				if v.ArrType == t {
					return nil
				}
			}
		} else {
			for _, t := range rule.types {
				if v.Type == t {
					if rule.positive && isZero(v.Val) {
						return fmt.Errorf("key %q = 0: must be positive", key)
					}
					return nil
				}
			}
		}
		var want []string
		for _, t := range rule.types {
			want = append(want, ggufTypeName(t))
		}
		for _, t := range rule.elems {
			want = append(want, "array of "+ggufTypeName(t))
		}
		return fmt.Errorf("key %q: type %s, llama.cpp reads it as %s", key, v.typeName(), strings.Join(want, " or "))
	}
	arch := ""
	if v, ok := h.KV["general.architecture"]; ok {
		arch, _ = v.Val.(string)
	}
	for key, v := range h.KV {
		if rule, ok := generalRules[key]; ok {
			if err := check(key, rule, v); err != nil {
				return err
			}
		}
		if arch != "" && strings.HasPrefix(key, arch+".") {
			suffix := strings.TrimPrefix(key, arch+".")
			if rule, ok := archRules[suffix]; ok {
				if err := check(key, rule, v); err != nil {
					return err
				}
			}
		}
		if f, ok := v.Val.(float64); ok && (v.Type == ggufF32 || v.Type == ggufF64) {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("key %q = %v: not a finite number", key, f)
			}
			if strings.HasSuffix(key, "epsilon") && f < 0 {
				return fmt.Errorf("key %q = %v: must not be negative", key, f)
			}
			// The adapter's scale is alpha/rank: a huge one overflows every
			// logit to Inf (each request after loading it failed).
			if key == "adapter.lora.alpha" && math.Abs(f) > maxLoraAlpha {
				return fmt.Errorf("key %q = %v: at most %v in magnitude", key, f, float64(maxLoraAlpha))
			}
		}
	}
	if toks, ok := h.KV[tokenListKey]; ok {
		if toks.N == 0 {
			return fmt.Errorf("key %q: no tokens", tokenListKey)
		}
		if toks.N > math.MaxInt32 {
			return fmt.Errorf("key %q: %d tokens, more than a token id can hold", tokenListKey, toks.N)
		}
		for _, k := range []string{"tokenizer.ggml.scores", "tokenizer.ggml.token_type"} {
			if v, ok := h.KV[k]; ok && v.N != toks.N {
				return fmt.Errorf("key %q: %d values for %d tokens", k, v.N, toks.N)
			}
		}
	}
	return nil
}

func isZero(v any) bool {
	switch v := v.(type) {
	case uint64:
		return v == 0
	case int64:
		return v == 0
	case float64:
		return v == 0
	}
	return false
}
