package llama

/*
#include <stdlib.h>
#include "llama.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"unsafe"

	"github.com/confclip/confclip/llama/internal/handle"
)

// ContextParams sizes a context.
type ContextParams struct {
	NCtx      int       // context size in tokens, shared by all sequences (0 = the model's training context)
	NBatch    int       // most tokens one Decode takes (0 = NCtx)
	NUBatch   int       // tokens per compute step (0 = min(NBatch, 512))
	NSeqMax   int       // most sequences in flight (0 = 1)
	Threads   int       // 0 = the machine's cores
	FlashAttn FlashAttn // FlashAttnAuto (the zero value), FlashAttnOn or FlashAttnOff
	TypeK     KVType    // the K cache's type; KVDefault (the zero value) is llama.cpp's f16
	TypeV     KVType    // likewise for V
	// TrainingGraphs sizes the compute graph for PGEval's backward pass
	// (several times the forward graph's nodes).
	TrainingGraphs bool
	// Profile times every ggml op the context computes (Context.Profile);
	// each node then runs on its own, which costs a little time.
	Profile bool
}

// Context is a model's inference state: the KV cache and the compute
// buffers. It is used by one goroutine at a time. It holds its model and the
// adapters set on it, so neither is freed while it lives.
type Context struct {
	model *Model // kept alive as long as the context
	r     *ctxRes
	nctx  int
	nbat  int
	nseq  int
	// cleanup frees r when the context is dropped without Close.
	cleanup runtime.Cleanup
}

// ctxRes is a context's C side. The context's Close, its cleanup and its
// model's Close free it, whichever comes first, under lifeMu. It holds the
// model and the adapters set on the context (not the Context itself, which
// would then never become unreachable).
type ctxRes struct {
	c        *C.struct_llama_context
	prof     *profState // nil unless ContextParams.Profile
	m        *Model
	adapters map[*Adapter]float32
	life     life // the calls running on the context
}

// free frees the C context once (lifeMu held).
func (r *ctxRes) free() {
	if r.c == nil {
		return
	}
	C.llama_free(r.c)
	C.free(unsafe.Pointer(r.prof))
	r.c, r.prof = nil, nil
	for a := range r.adapters {
		delete(a.r.users, r)
	}
	r.adapters = nil
	delete(r.m.ctxs, r)
}

// FlashAttn is how a context uses flash attention.
type FlashAttn int

const (
	FlashAttnAuto FlashAttn = iota // llama.cpp decides (the default)
	FlashAttnOn
	FlashAttnOff
)

var flashAttns = [...]struct {
	name string
	c    C.enum_llama_flash_attn_type
}{
	FlashAttnAuto: {"auto", C.LLAMA_FLASH_ATTN_TYPE_AUTO},
	FlashAttnOn:   {"on", C.LLAMA_FLASH_ATTN_TYPE_ENABLED},
	FlashAttnOff:  {"off", C.LLAMA_FLASH_ATTN_TYPE_DISABLED},
}

// String is the setting's name.
func (f FlashAttn) String() string {
	if f < 0 || int(f) >= len(flashAttns) {
		return fmt.Sprintf("FlashAttn(%d)", int(f))
	}
	return flashAttns[f].name
}

// ParseFlashAttn reads a flash attention setting by name ("" is auto).
func ParseFlashAttn(s string) (FlashAttn, error) {
	if s == "" {
		return FlashAttnAuto, nil
	}
	for i, f := range flashAttns {
		if f.name == s {
			return FlashAttn(i), nil
		}
	}
	return 0, fmt.Errorf("llama: flash attention %q: want auto, on or off", s)
}

// KVType is the element type of a KV cache.
type KVType int

const (
	KVDefault KVType = iota // llama.cpp's default (f16)
	KVF32
	KVF16
	KVBF16
	KVQ8_0
	KVQ4_0
	KVQ4_1
	KVQ5_0
	KVQ5_1
)

var kvTypes = [...]struct {
	name string
	c    C.enum_ggml_type
}{
	KVDefault: {"", 0}, KVF32: {"f32", C.GGML_TYPE_F32}, KVF16: {"f16", C.GGML_TYPE_F16}, KVBF16: {"bf16", C.GGML_TYPE_BF16},
	KVQ8_0: {"q8_0", C.GGML_TYPE_Q8_0}, KVQ4_0: {"q4_0", C.GGML_TYPE_Q4_0}, KVQ4_1: {"q4_1", C.GGML_TYPE_Q4_1},
	KVQ5_0: {"q5_0", C.GGML_TYPE_Q5_0}, KVQ5_1: {"q5_1", C.GGML_TYPE_Q5_1},
}

// String is the type's name ("" for the default).
func (t KVType) String() string {
	if t < 0 || int(t) >= len(kvTypes) {
		return fmt.Sprintf("KVType(%d)", int(t))
	}
	return kvTypes[t].name
}

// ParseKVType reads a KV cache type by name ("" is the default).
func ParseKVType(s string) (KVType, error) {
	for i, t := range kvTypes {
		if t.name == s {
			return KVType(i), nil
		}
	}
	var names []string
	for _, t := range kvTypes[1:] {
		names = append(names, t.name)
	}
	return 0, fmt.Errorf("llama: unknown KV cache type %q (want one of %s)", s, strings.Join(names, ", "))
}

// cacheParams sets the context parameters' flash attention and KV cache
// types; a value out of range is an error.
func (p ContextParams) cacheParams(cp *C.struct_llama_context_params) error {
	if p.FlashAttn < 0 || int(p.FlashAttn) >= len(flashAttns) {
		return fmt.Errorf("llama: flash attention %v: want auto, on or off", p.FlashAttn)
	}
	cp.flash_attn_type = flashAttns[p.FlashAttn].c
	for _, kv := range []struct {
		t   KVType
		dst *C.enum_ggml_type
	}{{p.TypeK, &cp.type_k}, {p.TypeV, &cp.type_v}} {
		if kv.t < 0 || int(kv.t) >= len(kvTypes) {
			return fmt.Errorf("llama: KV cache type %v out of range", kv.t)
		}
		if kv.t != KVDefault {
			*kv.dst = kvTypes[kv.t].c
		}
	}
	return nil
}

// NewContext creates a context for the model.
func NewContext(m *Model, p ContextParams) (*Context, error) {
	// A call on the model: its Close waits for it, so the context is
	// registered before Close collects the model's contexts.
	if !m.enter() {
		return nil, fmt.Errorf("llama: NewContext: %w", ErrClosed)
	}
	defer m.exit()
	if m.vocabOnly {
		return nil, fmt.Errorf("%s: loaded vocab-only; a context needs the weights", m.path)
	}
	if p.TrainingGraphs && m.repacked {
		// ggml's scheduler would abort: no backend runs the backward
		// product (OUT_PROD) on a repacked weight.
		return nil, fmt.Errorf("%s: its Q4_0/Q4_K/Q2_K/IQ4_NL weights were repacked for the CPU at load; training over them needs the model loaded with NoRepack", m.path)
	}
	if p.TrainingGraphs && m.halfType != "" && len(m.devices) == 0 {
		// ggml's CPU backend has no backward product (OUT_PROD) for F16
		// or BF16 weights, and the scheduler aborts the process when no
		// backend can run an op (train's TestTrainingRefusesHalfWeights).
		return nil, fmt.Errorf("%s: has %s weights; training on the CPU needs F32 or quantized (for example Q8_0) weights: ggml's CPU backend has no backward pass through %s matrices (convert it, e.g. with llama.cpp's llama-quantize to Q8_0)", m.path, strings.ToUpper(m.halfType), strings.ToUpper(m.halfType))
	}
	if p.NCtx < 0 || p.NBatch < 0 || p.NUBatch < 0 || p.NSeqMax < 0 {
		return nil, fmt.Errorf("llama: negative context size in %+v", p)
	}
	if p.NSeqMax > int(C.llama_max_parallel_sequences()) {
		return nil, fmt.Errorf("llama: %d parallel sequences asked, llama.cpp allows at most %d", p.NSeqMax, int(C.llama_max_parallel_sequences()))
	}
	cp := C.llama_context_default_params()
	if p.NCtx == 0 {
		p.NCtx = int(C.llama_model_n_ctx_train(m.m))
	}
	if p.NBatch == 0 {
		p.NBatch = p.NCtx
	}
	if p.NUBatch == 0 {
		p.NUBatch = min(p.NBatch, 512)
	}
	if p.NSeqMax == 0 {
		p.NSeqMax = 1
	}
	if p.Threads <= 0 {
		p.Threads = DefaultThreads()
	}
	cp.n_ctx = C.uint32_t(p.NCtx)
	cp.n_batch = C.uint32_t(p.NBatch)
	cp.n_ubatch = C.uint32_t(p.NUBatch)
	cp.n_seq_max = C.uint32_t(p.NSeqMax)
	cp.n_threads = C.int32_t(p.Threads)
	cp.n_threads_batch = C.int32_t(p.Threads)
	cp.no_perf = true
	cp.op_offload = C.bool(m.opOffload)
	if p.TrainingGraphs {
		cp.n_graph_nodes_mult = 8
	}
	// One KV buffer shared by all sequences, so that a group of sequences can
	// share its prompt's cells and NCtx is a budget over all of them.
	cp.kv_unified = true
	if err := p.cacheParams(&cp); err != nil {
		return nil, err
	}
	var prof *profState
	if p.Profile {
		prof = newProfile(&cp)
	}
	var c *C.struct_llama_context
	msg := call(func() { c = C.llama_init_from_model(m.m, cp) })
	if c == nil {
		C.free(unsafe.Pointer(prof))
		return nil, fmt.Errorf("llama: %s", because("creating the context failed", msg))
	}
	r := &ctxRes{c: c, prof: prof, m: m, adapters: map[*Adapter]float32{}}
	lifeMu.Lock()
	m.ctxs[r] = struct{}{}
	lifeMu.Unlock()
	ctx := &Context{model: m, r: r, nctx: int(C.llama_n_ctx(c)), nbat: int(C.llama_n_batch(c)), nseq: p.NSeqMax}
	ctx.cleanup = runtime.AddCleanup(ctx, freeCtx, r)
	return ctx, nil
}

func freeCtx(r *ctxRes) {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	r.free()
}

// Close frees the context (and lets go of its adapters). As Model.Close, it
// may run while other goroutines call the context: calls that start after
// it get ErrClosed (or do nothing where they return no error), and it waits
// for the running ones before it frees the context. A second Close, or one
// after the model's Close (which closed the context), returns ErrClosed.
func (c *Context) Close() error {
	if c == nil || c.r == nil || !c.r.life.close() {
		return ErrClosed
	}
	c.cleanup.Stop()
	freeCtx(c.r)
	return nil
}

// closed reports whether the context's Close (or its model's) has begun.
func (c *Context) closed() bool { return c == nil || c.r == nil || c.r.life.isClosing() }

// enter starts a call on the open context: false once Close has begun.
func (c *Context) enter() bool { return c != nil && c.r != nil && c.r.life.acquire() }

// exit ends a call that enter started, keeping the context (hence its model
// and adapters) alive until then.
func (c *Context) exit() {
	c.r.life.release()
	runtime.KeepAlive(c)
}

// with runs f on the open context as one call (enter, exit); on a closed
// context it returns ErrClosed and f never runs.
func (c *Context) with(f func(*C.struct_llama_context)) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.exit()
	f(c.r.c)
	return nil
}

// The packages under llama/ that call the C API beside the binding
// (reference, opcheck) reach its handles and error capture through
// llama/internal/handle.
func init() {
	handle.Call = call
	handle.Context = func(ctx any, f func(unsafe.Pointer, int)) error {
		c := ctx.(*Context)
		return c.with(func(cc *C.struct_llama_context) { f(unsafe.Pointer(cc), c.nseq) })
	}
}

// do is with for the methods that return no error: on a closed context f
// does not run, and the method returns its zero value.
func (c *Context) do(f func(*C.struct_llama_context)) {
	if err := c.with(f); err != nil {
		return
	}
}

// Model is the context's model.
func (c *Context) Model() *Model { return c.model }

// NCtx is the context size in tokens (llama.cpp may round it up).
func (c *Context) NCtx() int { return c.nctx }

// NBatch is the most tokens one Decode accepts.
func (c *Context) NBatch() int { return c.nbat }

// NSeqMax is the most sequences in flight.
func (c *Context) NSeqMax() int { return c.nseq }

// SetThreads changes the thread count.
func (c *Context) SetThreads(n int) {
	if n <= 0 {
		n = DefaultThreads()
	}
	c.do(func(cc *C.struct_llama_context) { C.llama_set_n_threads(cc, C.int32_t(n), C.int32_t(n)) })
}

// ErrNoKVSlot is returned by Decode when the KV cache has no room for the
// batch: the sequences in flight need more than NCtx tokens.
var ErrNoKVSlot = errors.New("llama: the KV cache is full (context too small for the sequences in flight)")

// Decode runs the model on a batch. The batch is checked first (token ids,
// sequence ids, positions), since llama.cpp aborts on some invalid input.
func (c *Context) Decode(b *Batch) error {
	defer runtime.KeepAlive(b)
	if b.err != nil {
		return b.err
	}
	if c.closed() || b.closed() {
		return ErrClosed
	}
	if b.n == 0 {
		return errors.New("llama: Decode of an empty batch")
	}
	if b.n > c.nbat {
		return fmt.Errorf("llama: batch of %d tokens exceeds the context's batch size %d", b.n, c.nbat)
	}
	nv := int32(c.model.nv)
	toks := unsafe.Slice(b.b.token, b.n)
	pos := unsafe.Slice(b.b.pos, b.n)
	nseq := unsafe.Slice(b.b.n_seq_id, b.n)
	seqs := unsafe.Slice(b.b.seq_id, b.n)
	for i := 0; i < b.n; i++ {
		if t := int32(toks[i]); t < 0 || t >= nv {
			return fmt.Errorf("llama: token %d at batch index %d outside the vocabulary (size %d)", t, i, nv)
		}
		if p := int(pos[i]); p < 0 || p >= c.nctx {
			return fmt.Errorf("llama: position %d at batch index %d is past the context (%d tokens)", p, i, c.nctx)
		}
		for _, s := range unsafe.Slice(seqs[i], nseq[i]) {
			if int(s) < 0 || int(s) >= c.nseq {
				return fmt.Errorf("llama: sequence id %d at batch index %d outside [0, %d)", s, i, c.nseq)
			}
		}
	}
	c.profStart()
	var rc C.int32_t
	var msg string
	if err := c.with(func(cc *C.struct_llama_context) { msg = call(func() { rc = C.llama_decode(cc, b.b) }) }); err != nil {
		return err
	}
	switch {
	case rc == 0:
		return nil
	case rc == 1:
		return ErrNoKVSlot
	case rc == 2:
		return errors.New("llama: decode aborted")
	default:
		return fmt.Errorf("llama: %s", because(fmt.Sprintf("decode failed (%d)", int(rc)), msg))
	}
}

// Logits returns the logits row of batch index i of the last Decode (the
// index must have been added with logits=true). The slice points into
// llama.cpp's buffer without copying (the rollout engine reads a row per
// token): it is valid until the next Decode or Close of the context, and it
// does not keep the context alive, so the caller must hold the context while
// it reads the slice. CopyLogits copies the row out instead.
func (c *Context) Logits(i int) ([]float32, error) {
	var p *C.float
	var msg string
	if err := c.with(func(cc *C.struct_llama_context) { msg = call(func() { p = C.llama_get_logits_ith(cc, C.int32_t(i)) }) }); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("llama: %s", because(fmt.Sprintf("no logits for batch index %d", i), msg))
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(p)), c.model.nv), nil
}

// CopyLogits copies the logits row of batch index i of the last Decode into
// dst (len(dst) == NVocab of the model) as one call: a concurrent Close
// waits until the row is copied.
func (c *Context) CopyLogits(i int, dst []float32) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.exit()
	row, err := c.Logits(i)
	if err != nil {
		return err
	}
	if len(dst) != len(row) {
		return fmt.Errorf("llama: CopyLogits into %d values, the vocabulary has %d", len(dst), len(row))
	}
	copy(dst, row)
	return nil
}

// SeqRemove removes sequence seq's cells at positions [p0, p1) (p1 < 0: to
// the end; seq < 0: every sequence). It is false on a closed context.
func (c *Context) SeqRemove(seq, p0, p1 int) bool {
	ok := false
	c.do(func(cc *C.struct_llama_context) { // closed: false
		ok = bool(C.llama_memory_seq_rm(C.llama_get_memory(cc), C.llama_seq_id(seq), C.llama_pos(p0), C.llama_pos(p1)))
	})
	return ok
}

// SeqCopy makes dst share src's cells at positions [p0, p1) (no data copy in
// a unified cache).
func (c *Context) SeqCopy(src, dst, p0, p1 int) {
	c.do(func(cc *C.struct_llama_context) { // closed: nothing to copy
		C.llama_memory_seq_cp(C.llama_get_memory(cc), C.llama_seq_id(src), C.llama_seq_id(dst), C.llama_pos(p0), C.llama_pos(p1))
	})
}

// SeqKeep removes every sequence but seq.
func (c *Context) SeqKeep(seq int) {
	c.do(func(cc *C.struct_llama_context) { C.llama_memory_seq_keep(C.llama_get_memory(cc), C.llama_seq_id(seq)) })
}

// SeqPosMax is the largest position held for seq (-1 when empty or closed).
func (c *Context) SeqPosMax(seq int) int {
	n := -1
	c.do(func(cc *C.struct_llama_context) { // closed: -1
		n = int(C.llama_memory_seq_pos_max(C.llama_get_memory(cc), C.llama_seq_id(seq)))
	})
	return n
}

// ClearKV empties the KV cache.
func (c *Context) ClearKV() {
	c.do(func(cc *C.struct_llama_context) { C.llama_memory_clear(C.llama_get_memory(cc), true) })
}

// Batch is a set of tokens to decode, possibly for several sequences.
type Batch struct {
	b       C.struct_llama_batch
	n, cap  int
	maxSeq  int
	err     error // allocation failure
	cleanup runtime.Cleanup
}

// NewBatch allocates a batch for up to capacity tokens, each belonging to at
// most maxSeqs sequences. llama_batch_init does not check its mallocs, so
// NewBatch does: a batch that could not be allocated has Err set, holds no
// C memory, and its Add and every Decode of it return that error.
func NewBatch(capacity, maxSeqs int) *Batch {
	if capacity < 1 {
		capacity = 1
	}
	if maxSeqs < 1 {
		maxSeqs = 1
	}
	cb := C.llama_batch_init(C.int32_t(capacity), 0, C.int32_t(maxSeqs))
	ok := cb.token != nil && cb.pos != nil && cb.n_seq_id != nil && cb.seq_id != nil && cb.logits != nil
	if ok {
		for _, p := range unsafe.Slice(cb.seq_id, capacity) {
			ok = ok && p != nil
		}
	}
	if !ok {
		C.llama_batch_free(cb)
		return &Batch{err: fmt.Errorf("llama: out of memory for a batch of %d tokens", capacity)}
	}
	b := &Batch{b: cb, cap: capacity, maxSeq: maxSeqs}
	b.cleanup = runtime.AddCleanup(b, func(cb C.struct_llama_batch) { C.llama_batch_free(cb) }, cb)
	return b
}

// Err is the allocation error of a batch NewBatch could not allocate.
func (b *Batch) Err() error { return b.err }

// Close releases the batch. It is safe to call twice.
func (b *Batch) Close() error {
	if b.cap > 0 {
		b.cleanup.Stop()
		C.llama_batch_free(b.b)
		b.cap, b.n = 0, 0
	}
	return nil
}

func (b *Batch) closed() bool { return b == nil || b.cap == 0 }

// Len is the number of tokens in the batch.
func (b *Batch) Len() int { return b.n }

// Cap is the batch's capacity.
func (b *Batch) Cap() int { return b.cap }

// Clear empties the batch.
func (b *Batch) Clear() { b.n = 0; b.b.n_tokens = 0 }

// Add appends a token at position pos for the given sequences; logits asks for
// its logits row. It returns the token's batch index.
func (b *Batch) Add(t Token, pos int, seqs []int, logits bool) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.closed() {
		return 0, ErrClosed
	}
	defer runtime.KeepAlive(b) // b.b's arrays are freed by b's cleanup
	if b.n >= b.cap {
		return 0, fmt.Errorf("llama: batch full (%d tokens)", b.cap)
	}
	if len(seqs) == 0 || len(seqs) > b.maxSeq {
		return 0, fmt.Errorf("llama: token in %d sequences, batch allows 1 to %d", len(seqs), b.maxSeq)
	}
	i := b.n
	*(*C.llama_token)(unsafe.Add(unsafe.Pointer(b.b.token), i*C.sizeof_llama_token)) = C.llama_token(t)
	*(*C.llama_pos)(unsafe.Add(unsafe.Pointer(b.b.pos), i*C.sizeof_llama_pos)) = C.llama_pos(pos)
	*(*C.int32_t)(unsafe.Add(unsafe.Pointer(b.b.n_seq_id), i*4)) = C.int32_t(len(seqs))
	sp := *(**C.llama_seq_id)(unsafe.Add(unsafe.Pointer(b.b.seq_id), i*int(unsafe.Sizeof(uintptr(0)))))
	dst := unsafe.Slice(sp, len(seqs))
	for j, s := range seqs {
		dst[j] = C.llama_seq_id(s)
	}
	var l C.int8_t
	if logits {
		l = 1
	}
	*(*C.int8_t)(unsafe.Add(unsafe.Pointer(b.b.logits), i)) = l
	b.n++
	b.b.n_tokens = C.int32_t(b.n)
	return i, nil
}

// Adapter is a loaded LoRA adapter. It keeps its model alive, and the
// contexts it is set on keep it alive.
type Adapter struct {
	model   *Model
	path    string
	r       *adapterRes
	alpha   float64
	tensors []string // as in the file, read when loading
	cleanup runtime.Cleanup
}

// adapterRes is an adapter's C side, freed once (under lifeMu) by the
// adapter's Close, its cleanup or its model's Close. users are the contexts
// it is set on.
type adapterRes struct {
	a     *C.struct_llama_adapter_lora
	m     *Model
	users map[*ctxRes]struct{}
	life  life // the calls running on the adapter (its tensors)
}

func (r *adapterRes) free() {
	if r.a == nil {
		return
	}
	C.llama_adapter_lora_free(r.a)
	r.a = nil
	delete(r.m.adapters, r)
}

func freeAdapter(r *adapterRes) {
	lifeMu.Lock()
	defer lifeMu.Unlock()
	r.free()
}

// LoadAdapter loads a LoRA adapter in llama.cpp's GGUF format for the model.
func LoadAdapter(m *Model, path string) (*Adapter, error) {
	// A call on the model, as NewContext.
	if !m.enter() {
		return nil, ErrClosed
	}
	defer m.exit()
	g, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	kind, arch := g.String("general.type"), g.String("general.architecture")
	alpha, _ := g.Get("adapter.lora.alpha")
	var names []string
	for _, t := range g.Tensors() {
		names = append(names, t.Name)
	}
	_ = g.Close() // a header's Close never fails
	if kind != "adapter" {
		return nil, fileErr(path, "not a LoRA adapter (general.type %q)", kind)
	}
	if a := m.Architecture(); arch != a {
		return nil, fileErr(path, "adapter for architecture %q, the model is %q", arch, a)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var a *C.struct_llama_adapter_lora
	var msg string
	if err := m.with(func(cm *C.struct_llama_model) { msg = call(func() { a = C.llama_adapter_lora_init(cm, cpath) }) }); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fileErr(path, "%s", because("llama.cpp could not load the adapter", msg))
	}
	al, _ := alpha.(float64)
	r := &adapterRes{a: a, m: m, users: map[*ctxRes]struct{}{}}
	lifeMu.Lock()
	m.adapters[r] = struct{}{}
	lifeMu.Unlock()
	ad := &Adapter{model: m, path: path, r: r, alpha: al, tensors: names}
	ad.cleanup = runtime.AddCleanup(ad, freeAdapter, r)
	return ad, nil
}

// Model is the model the adapter was loaded for.
func (a *Adapter) Model() *Model { return a.model }

// Path is the file the adapter was loaded from.
func (a *Adapter) Path() string { return a.path }

// Alpha is the adapter's adapter.lora.alpha (0 when the file has none).
func (a *Adapter) Alpha() float64 { return a.alpha }

// TensorNames lists the adapter's tensors as its file had them.
func (a *Adapter) TensorNames() []string { return a.tensors }

// ErrAdapterInUse is returned by Adapter.Close while the adapter is set on an
// open context: the context would compute with freed weights.
var ErrAdapterInUse = errors.New("llama: the adapter is set on an open context (remove it or close the context first)")

// Close frees the adapter, after the calls running on it (reading or
// writing its tensors, a training pass over them) end; calls that start
// after it get ErrClosed, and so does a second Close. While the adapter is
// set on an open context it returns ErrAdapterInUse and frees nothing.
func (a *Adapter) Close() error {
	if a == nil || a.r == nil {
		return ErrClosed
	}
	lifeMu.Lock()
	err := a.inUseLocked()
	lifeMu.Unlock()
	if err != nil {
		return err
	}
	if !a.r.life.close() {
		return ErrClosed
	}
	lifeMu.Lock()
	defer lifeMu.Unlock()
	if err := a.inUseLocked(); err != nil {
		// set on a context while Close waited for a call
		a.r.life.reopen()
		return err
	}
	a.cleanup.Stop()
	a.r.free()
	return nil
}

// inUseLocked is ErrAdapterInUse (wrapped) while the adapter is set on a
// context; lifeMu is held.
func (a *Adapter) inUseLocked() error {
	if n := len(a.r.users); n > 0 {
		return fmt.Errorf("%w: %s on %d context(s)", ErrAdapterInUse, a.path, n)
	}
	return nil
}

// closed reports whether the adapter's Close (or its model's) has begun.
func (a *Adapter) closed() bool { return a == nil || a.r == nil || a.r.life.isClosing() }

// enter starts a call on the open adapter: false once Close has begun.
func (a *Adapter) enter() bool { return a != nil && a.r != nil && a.r.life.acquire() }

// exit ends a call that enter started, keeping the adapter alive until then.
func (a *Adapter) exit() {
	a.r.life.release()
	runtime.KeepAlive(a)
}

// with runs f on the open adapter as one call (enter, exit).
func (a *Adapter) with(f func(*C.struct_llama_adapter_lora)) error {
	if !a.enter() {
		return ErrClosed
	}
	defer a.exit()
	f(a.r.a)
	return nil
}

// SetAdapter applies an adapter with a scale (1 = as trained). The context
// holds the adapter until it is removed or the context is closed.
func (c *Context) SetAdapter(a *Adapter, scale float32) error {
	// A call on the adapter: its Close waits for it and then finds it set.
	if !a.enter() {
		return ErrClosed
	}
	defer a.exit()
	if a.model != c.model {
		return fmt.Errorf("llama: adapter %s was loaded for %s, the context's model is %s", a.path, a.model.path, c.model.path)
	}
	var err error
	if e := c.with(func(cc *C.struct_llama_context) {
		lifeMu.Lock()
		defer lifeMu.Unlock()
		set := maps.Clone(c.r.adapters)
		set[a] = scale
		if err = setAdapters(cc, set); err != nil {
			err = fmt.Errorf("llama: applying adapter %s: %w", a.path, err)
			return
		}
		c.r.adapters[a] = scale
		a.r.users[c.r] = struct{}{}
	}); e != nil {
		return e
	}
	return err
}

// setAdapters makes set the context's whole adapter list
// (llama_set_adapters_lora, which replaces the list at once). The caller
// holds lifeMu, so no adapter of set is freed meanwhile.
func setAdapters(cc *C.struct_llama_context, set map[*Adapter]float32) error {
	ptrs := make([]*C.struct_llama_adapter_lora, 0, len(set))
	scales := make([]C.float, 0, len(set))
	for a, s := range set {
		ptrs = append(ptrs, a.r.a)
		scales = append(scales, C.float(s))
	}
	var p **C.struct_llama_adapter_lora
	var sp *C.float
	if len(ptrs) > 0 {
		p, sp = &ptrs[0], &scales[0]
	}
	var rc C.int32_t
	msg := call(func() { rc = C.llama_set_adapters_lora(cc, p, C.size_t(len(ptrs)), sp) })
	if rc != 0 {
		return errors.New(because("llama_set_adapters_lora failed", msg))
	}
	return nil
}

// RemoveAdapter removes one adapter from the context.
func (c *Context) RemoveAdapter(a *Adapter) {
	defer runtime.KeepAlive(a)
	if a.closed() {
		return
	}
	c.do(func(cc *C.struct_llama_context) { // closed: nothing to remove
		lifeMu.Lock()
		defer lifeMu.Unlock()
		if _, ok := c.r.adapters[a]; !ok {
			return
		}
		set := maps.Clone(c.r.adapters)
		delete(set, a)
		// llama_set_adapters_lora fails on no list; were it to, the context
		// would still hold the adapter, and so does c.r.adapters.
		if setAdapters(cc, set) != nil {
			return
		}
		delete(c.r.adapters, a)
		delete(a.r.users, c.r)
	})
}

// ClearAdapters removes every adapter from the context.
func (c *Context) ClearAdapters() {
	c.do(func(cc *C.struct_llama_context) { // closed: nothing to clear
		lifeMu.Lock()
		if setAdapters(cc, nil) != nil { // as in RemoveAdapter
			lifeMu.Unlock()
			return
		}
		for a := range c.r.adapters {
			delete(a.r.users, c.r)
		}
		clear(c.r.adapters)
		lifeMu.Unlock()
	})
}

// Adapters is the number of adapters set on the context.
func (c *Context) Adapters() int {
	if c == nil || c.r == nil {
		return 0
	}
	lifeMu.Lock()
	defer lifeMu.Unlock()
	return len(c.r.adapters) // nil once freed
}
