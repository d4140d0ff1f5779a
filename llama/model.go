package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "ggml-backend.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// ModelParams says how to load a model.
type ModelParams struct {
	GPULayers int // layers to offload to the GPU; -1 = all, 0 = none (CPU only)
	// Device names the one device to offload to ("Vulkan0", "CUDA1"; see
	// Devices); "" = every GPU, "CPU" = none.
	Device string
	// OpOffload lets large matrix products of CPU layers run on the GPU
	// (llama.cpp's op offload). It is always on with GPU layers; with none it
	// is off unless set here, so that GPULayers 0 means CPU only.
	OpOffload bool
	NoMmap    bool // read the file instead of mapping it
	VocabOnly bool // load only the tokenizer (vocab-only GGUF files)
	// NoRepack keeps quantized weights in the file's layout. By default
	// llama.cpp repacks Q4_0, Q4_K, Q2_K and IQ4_NL weights for the CPU's
	// matrix products, a layout only the forward product reads: a training
	// context (LoRA over a quantized base) needs the model loaded with
	// NoRepack, and NewContext refuses one without it.
	NoRepack bool
}

// Model is a loaded GGUF model. It is read-only after loading and may be
// shared by goroutines; Close it once nothing uses it.
type Model struct {
	path  string
	m     *C.struct_llama_model
	vocab *C.struct_llama_vocab
	nv    int
	// vocabOnly models have no hyperparameters; llama.cpp aborts when asked
	// for them, so Info leaves them zero.
	vocabOnly bool
	opOffload bool     // see ModelParams.OpOffload
	devices   []Device // the GPUs it may use (Devices)
	cleanup   runtime.Cleanup
	repacked  bool   // weights of a repackable type loaded without NoRepack
	halfType  string // "f16" or "bf16" when a matrix multiplied in the graph has that type
	// The open contexts and adapters made from the model (under lifeMu):
	// Close frees them first.
	ctxs     map[*ctxRes]struct{}
	adapters map[*adapterRes]struct{}
	life     life // the calls running on the model
}

// Token is a vocabulary id.
type Token = int32

// LoadModel loads a GGUF model. Files that llama.cpp would abort on are
// checked first, so every bad file is a Go error naming it.
func LoadModel(path string, p ModelParams) (*Model, error) {
	g, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	arch := g.String("general.architecture")
	kind := g.String("general.type")
	nTensors := len(g.Tensors())
	repackable, hasOutput := false, false
	// halfType is the type of an F16/BF16 matrix the backward pass
	// multiplies through; the token embedding is read by rows (GET_ROWS)
	// and counts only when it is also the output matrix.
	halfType, halfEmbd := "", ""
	for _, t := range g.Tensors() {
		hasOutput = hasOutput || t.Name == "output.weight"
		switch t.Type {
		case "q4_0", "q4_K", "q2_K", "iq4_nl":
			repackable = true
		case "f16", "bf16":
			if t.Name == "token_embd.weight" {
				halfEmbd = t.Type
			} else {
				halfType = t.Type
			}
		}
	}
	if halfType == "" && !hasOutput {
		halfType = halfEmbd
	}
	g.Close()
	if arch == "" {
		return nil, fileErr(path, "no general.architecture key: not a model file")
	}
	if kind == "adapter" {
		return nil, fileErr(path, "is a LoRA adapter, not a model")
	}
	if nTensors == 0 && !p.VocabOnly {
		return nil, fileErr(path, "has no tensors (a vocab-only file? load it with vocab-only)")
	}

	mp := C.llama_model_default_params()
	mp.n_gpu_layers = C.int32_t(p.GPULayers)
	if p.GPULayers < 0 {
		mp.n_gpu_layers = 999
	}
	devs, gpus, err := selectDevices(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if devs != nil {
		defer C.free(unsafe.Pointer(devs))
		mp.devices = devs
	}
	mp.load_mode = C.LLAMA_LOAD_MODE_MMAP
	if p.NoMmap {
		mp.load_mode = C.LLAMA_LOAD_MODE_NONE
	}
	mp.vocab_only = C.bool(p.VocabOnly)
	if p.NoRepack {
		mp.use_extra_bufts = false
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var m *C.struct_llama_model
	msg := call(func() { m = C.llama_model_load_from_file(cpath, mp) })
	if m == nil {
		return nil, fileErr(path, "%s", because("llama.cpp could not load the model (architecture "+arch+")", msg))
	}
	model := &Model{path: path, m: m, vocab: C.llama_model_get_vocab(m), vocabOnly: p.VocabOnly,
		opOffload: p.GPULayers != 0 || p.OpOffload, devices: gpus, repacked: repackable && !p.NoRepack, halfType: halfType,
		ctxs: map[*ctxRes]struct{}{}, adapters: map[*adapterRes]struct{}{}}
	model.nv = int(C.llama_vocab_n_tokens(model.vocab))
	model.cleanup = runtime.AddCleanup(model, func(m *C.struct_llama_model) { C.llama_model_free(m) }, m)
	return model, nil
}

// Close frees the model. The contexts and adapters made from it that are
// still open are closed first (llama.cpp's contexts and adapters point into
// the model): their methods then return ErrClosed. Like os.File's Close, it
// may run while other goroutines call the model, its contexts and adapters:
// a call that starts after Close began gets ErrClosed (or the zero value of
// a method that returns no error), and Close waits for the calls already
// running before it frees anything. A second Close returns ErrClosed.
// Contexts and adapters keep their model alive, so a model dropped without
// Close is freed after them.
func (m *Model) Close() error {
	if m == nil || !m.life.close() {
		return ErrClosed
	}
	// No call on the model runs now, and none starts: NewContext and
	// LoadAdapter are such calls, so the sets below are whole. Their
	// contexts' and adapters' running calls end before anything is freed.
	lifeMu.Lock()
	ctxs, ads := slices.Collect(maps.Keys(m.ctxs)), slices.Collect(maps.Keys(m.adapters))
	lifeMu.Unlock()
	for _, r := range ctxs {
		r.life.close()
	}
	for _, r := range ads {
		r.life.close()
	}
	lifeMu.Lock()
	defer lifeMu.Unlock()
	for r := range m.ctxs {
		r.free()
	}
	for r := range m.adapters {
		r.free()
	}
	m.cleanup.Stop()
	C.llama_model_free(m.m)
	m.m, m.vocab = nil, nil
	return nil
}

// closed reports whether the model's Close has begun.
func (m *Model) closed() bool { return m == nil || m.life.isClosing() }

// enter starts a call on the open model: false once Close has begun (the
// caller returns ErrClosed). exit ends it.
func (m *Model) enter() bool { return m != nil && m.life.acquire() }

// exit ends a call that enter started, keeping the model alive until then.
func (m *Model) exit() {
	m.life.release()
	runtime.KeepAlive(m)
}

// with runs f on the open model as one call (enter, exit); on a closed
// model it returns ErrClosed and f never runs.
func (m *Model) with(f func(*C.struct_llama_model)) error {
	if !m.enter() {
		return ErrClosed
	}
	defer m.exit()
	f(m.m)
	return nil
}

// CPUOnly reports whether the model runs on the CPU alone: no layer
// offloaded and no GPU product allowed (ModelParams.GPULayers 0 and
// OpOffload false), so its contexts' KV caches are in host memory.
func (m *Model) CPUOnly() bool { return !m.opOffload }

// OffloadDevice is the first GPU the model offloads to, with its memory
// as the driver reports it now; false for a model on the CPU alone.
func (m *Model) OffloadDevice() (Device, bool) {
	if !m.opOffload || len(m.devices) == 0 {
		return Device{}, false
	}
	for _, d := range Devices() {
		if d.Name == m.devices[0].Name {
			return d, true
		}
	}
	return m.devices[0], true
}

// Path is the file the model was loaded from.
func (m *Model) Path() string { return m.path }

// Meta returns a metadata value as a string ("" when absent).
func (m *Model) Meta(key string) string {
	if !m.enter() {
		return ""
	}
	defer m.exit()
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var buf [1024]C.char
	n := C.llama_model_meta_val_str(m.m, ck, &buf[0], C.size_t(len(buf)))
	if n < 0 {
		return ""
	}
	if int(n) >= len(buf) {
		big := make([]C.char, n+1)
		C.llama_model_meta_val_str(m.m, ck, &big[0], C.size_t(len(big)))
		return C.GoString(&big[0])
	}
	return C.GoString(&buf[0])
}

// Info is a model's metadata.
type Info struct {
	Architecture string `json:"architecture"`
	Description  string `json:"description"`
	Params       uint64 `json:"params"`
	FileType     string `json:"file_type"`
	SizeBytes    uint64 `json:"size_bytes"` // tensor bytes
	CtxTrain     int    `json:"ctx_train"`
	Embd         int    `json:"n_embd"`
	Layers       int    `json:"n_layer"`
	Heads        int    `json:"n_head"`
	HeadsKV      int    `json:"n_head_kv"`
	Vocab        int    `json:"n_vocab"`
	VocabType    string `json:"vocab_type"`
	BOS          Token  `json:"bos"`
	EOS          Token  `json:"eos"`
	EOT          Token  `json:"eot"`
	AddBOS       bool   `json:"add_bos"`
	ChatTemplate string `json:"chat_template,omitempty"`
}

var vocabTypes = map[C.enum_llama_vocab_type]string{
	C.LLAMA_VOCAB_TYPE_NONE: "none", C.LLAMA_VOCAB_TYPE_SPM: "spm", C.LLAMA_VOCAB_TYPE_BPE: "bpe",
	C.LLAMA_VOCAB_TYPE_WPM: "wpm", C.LLAMA_VOCAB_TYPE_UGM: "ugm", C.LLAMA_VOCAB_TYPE_RWKV: "rwkv",
}

// fileTypes names llama_ftype values (general.file_type).
var fileTypes = map[int]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}

// Info returns the model's metadata.
func (m *Model) Info() Info {
	if !m.enter() {
		return Info{}
	}
	defer m.exit()
	var desc [256]C.char
	C.llama_model_desc(m.m, &desc[0], C.size_t(len(desc)))
	ft := "unknown"
	if d := C.GoString(&desc[0]); strings.Contains(d, " all ") {
		ft = d[strings.Index(d, " all ")+1:] // "all F32 (guessed)"
	}
	if s := m.Meta("general.file_type"); s != "" {
		if n, err := strconv.Atoi(s); err != nil {
			ft = "type " + s // not a number: shown as the file has it
		} else if name, ok := fileTypes[n]; ok {
			ft = name
		} else {
			ft = "type " + s
		}
	}
	info := Info{
		Architecture: m.Meta("general.architecture"),
		Description:  C.GoString(&desc[0]),
		FileType:     ft,
		Vocab:        m.nv,
		VocabType:    vocabTypes[C.llama_vocab_type(m.vocab)],
		BOS:          Token(C.llama_vocab_bos(m.vocab)),
		EOS:          Token(C.llama_vocab_eos(m.vocab)),
		EOT:          Token(C.llama_vocab_eot(m.vocab)),
		AddBOS:       bool(C.llama_vocab_get_add_bos(m.vocab)),
		ChatTemplate: m.ChatTemplate(),
	}
	if !m.vocabOnly {
		info.Params = uint64(C.llama_model_n_params(m.m))
		info.SizeBytes = uint64(C.llama_model_size(m.m))
		info.CtxTrain = int(C.llama_model_n_ctx_train(m.m))
		info.Embd = int(C.llama_model_n_embd(m.m))
		info.Layers = int(C.llama_model_n_layer(m.m))
		info.Heads = int(C.llama_model_n_head(m.m))
		info.HeadsKV = int(C.llama_model_n_head_kv(m.m))
	}
	return info
}

// NVocab is the vocabulary size.
func (m *Model) NVocab() int { return m.nv }

// VocabOnly reports whether only the tokenizer was loaded.
func (m *Model) VocabOnly() bool { return m.vocabOnly }

// Architecture is general.architecture.
func (m *Model) Architecture() string { return m.Meta("general.architecture") }

// IsEOG reports whether t ends generation (EOS, EOT and the like).
func (m *Model) IsEOG(t Token) bool {
	if !m.enter() {
		return false
	}
	defer m.exit()
	return bool(C.llama_vocab_is_eog(m.vocab, C.llama_token(t)))
}

// ChatTemplate is the model's own chat template ("" when it has none).
func (m *Model) ChatTemplate() string {
	if !m.enter() {
		return ""
	}
	defer m.exit()
	p := C.llama_model_chat_template(m.m, nil)
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// ErrInvalidUTF8 is returned for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("text is not valid UTF-8")

// Tokenize turns text into token ids. addSpecial adds BOS (and EOS) as the
// model asks; parseSpecial lets special tokens such as <|im_start|> in the
// text become their ids.
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.exit()
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	if len(text) > 1<<30 {
		return nil, fmt.Errorf("text of %d bytes is too long to tokenize", len(text))
	}
	ct := C.CString(text)
	defer C.free(unsafe.Pointer(ct))
	n := len(text) + 8
	for {
		toks := make([]Token, n)
		var p *C.llama_token
		if n > 0 {
			p = (*C.llama_token)(unsafe.Pointer(&toks[0]))
		}
		got := int(C.llama_tokenize(m.vocab, ct, C.int32_t(len(text)), p, C.int32_t(n), C.bool(addSpecial), C.bool(parseSpecial)))
		if got >= 0 {
			return toks[:got], nil
		}
		if got == int(-1<<31) {
			return nil, fmt.Errorf("tokenizing %d bytes overflowed", len(text))
		}
		n = -got
	}
}

// TokenPiece is the bytes a token stands for. A piece may be part of a
// UTF-8 character (byte tokens), so it is returned as bytes. special renders
// special tokens (such as </s>) as text instead of nothing.
func (m *Model) TokenPiece(t Token, special bool) ([]byte, error) {
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.exit()
	if t < 0 || int(t) >= m.nv {
		return nil, fmt.Errorf("token %d outside the vocabulary (size %d)", t, m.nv)
	}
	var buf [256]C.char
	n := C.llama_token_to_piece(m.vocab, C.llama_token(t), &buf[0], C.int32_t(len(buf)), 0, C.bool(special))
	if n < 0 {
		big := make([]C.char, -n)
		n = C.llama_token_to_piece(m.vocab, C.llama_token(t), &big[0], C.int32_t(len(big)), 0, C.bool(special))
		return C.GoBytes(unsafe.Pointer(&big[0]), n), nil
	}
	return C.GoBytes(unsafe.Pointer(&buf[0]), n), nil
}

// Detokenize turns token ids back into text.
func (m *Model) Detokenize(toks []Token, removeSpecial, unparseSpecial bool) (string, error) {
	if !m.enter() {
		return "", ErrClosed
	}
	defer m.exit()
	for _, t := range toks {
		if t < 0 || int(t) >= m.nv {
			return "", fmt.Errorf("token %d outside the vocabulary (size %d)", t, m.nv)
		}
	}
	if len(toks) == 0 {
		return "", nil
	}
	n := len(toks)*8 + 16
	for {
		buf := make([]byte, n)
		got := int(C.llama_detokenize(m.vocab, (*C.llama_token)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)),
			(*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(n), C.bool(removeSpecial), C.bool(unparseSpecial)))
		if got >= 0 {
			return string(buf[:got]), nil
		}
		n = -got
	}
}

// Message is one chat turn.
type Message struct {
	Role    string
	Content string
}

// ApplyChatTemplate renders messages with a chat template: tmpl is a
// template's text or a built-in name ("chatml", "llama3", ...); "" means the
// model's own. addAssistant ends the text with the assistant's turn opener.
func (m *Model) ApplyChatTemplate(tmpl string, msgs []Message, addAssistant bool) (string, error) {
	if !m.enter() {
		return "", ErrClosed
	}
	defer m.exit()
	if tmpl == "" {
		tmpl = m.ChatTemplate()
		if tmpl == "" {
			return "", fmt.Errorf("%s: the model has no chat template; name one", m.path)
		}
	}
	return ApplyChatTemplate(tmpl, msgs, addAssistant)
}

// ApplyChatTemplate renders messages with a template's text or built-in name.
// llama.cpp supports a fixed list of templates (no Jinja interpreter).
func ApplyChatTemplate(tmpl string, msgs []Message, addAssistant bool) (string, error) {
	Init()
	if len(msgs) == 0 {
		return "", fmt.Errorf("no messages to render")
	}
	// Every check before the first C allocation: nothing to free on an
	// early return.
	size := 0
	for i, msg := range msgs {
		if !utf8.ValidString(msg.Content) || !utf8.ValidString(msg.Role) {
			return "", fmt.Errorf("message %d: %w", i+1, ErrInvalidUTF8)
		}
		size += len(msg.Role) + len(msg.Content)
	}
	ctmpl := C.CString(tmpl)
	defer C.free(unsafe.Pointer(ctmpl))
	cm := make([]C.struct_llama_chat_message, len(msgs))
	defer func() {
		for _, c := range cm {
			C.free(unsafe.Pointer(c.role))
			C.free(unsafe.Pointer(c.content))
		}
	}()
	for i, msg := range msgs {
		cm[i].role = C.CString(msg.Role)
		cm[i].content = C.CString(msg.Content)
	}
	// cm is Go memory holding only C pointers: cgo lets C read it during
	// the call.
	arr := &cm[0]
	n := 2*size + 256
	for {
		buf := make([]byte, n)
		got := int(C.llama_chat_apply_template(ctmpl, arr, C.size_t(len(cm)), C.bool(addAssistant), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(n)))
		if got < 0 {
			return "", fmt.Errorf("chat template not supported by llama.cpp (it knows a fixed list; see `llama_chat_builtin_templates`)")
		}
		if got <= n {
			return string(buf[:got]), nil
		}
		n = got
	}
}
