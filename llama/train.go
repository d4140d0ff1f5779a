package llama

/*
#include <stdlib.h>
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Param is a trainable tensor: a model weight (full-parameter training) or a
// LoRA matrix of an adapter. Its data lives in llama.cpp's buffers; Get and
// Set copy it out and back. The owner (model or adapter) must outlive it.
type Param struct {
	Name  string
	Shape []int64 // ggml order, ne0 first
	t     *C.struct_ggml_tensor
}

func newParam(name string, t *C.struct_ggml_tensor) (*Param, error) {
	if t == nil {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if t._type != C.GGML_TYPE_F32 {
		return nil, fmt.Errorf("tensor %q is %s; training needs F32 tensors", name, C.GoString(C.ggml_type_name(t._type)))
	}
	var shape []int64
	for i := 0; i < int(C.ggml_n_dims(t)); i++ {
		shape = append(shape, int64(t.ne[i]))
	}
	return &Param{Name: name, Shape: shape, t: t}, nil
}

// Len is the number of values.
func (p *Param) Len() int { return int(C.ggml_nelements(p.t)) }

// Get copies the tensor's values into dst (len(dst) == Len()).
func (p *Param) Get(dst []float32) {
	if len(dst) != p.Len() {
		panic(fmt.Sprintf("llama: Param.Get of %s into %d values, want %d", p.Name, len(dst), p.Len()))
	}
	C.ggml_backend_tensor_get(p.t, unsafe.Pointer(&dst[0]), 0, C.size_t(4*len(dst)))
}

// Set copies src into the tensor (len(src) == Len()).
func (p *Param) Set(src []float32) {
	if len(src) != p.Len() {
		panic(fmt.Sprintf("llama: Param.Set of %s from %d values, want %d", p.Name, len(src), p.Len()))
	}
	C.ggml_backend_tensor_set(p.t, unsafe.Pointer(&src[0]), 0, C.size_t(4*len(src)))
	runtime.KeepAlive(src)
}

// Weight returns a model weight by its GGUF name (for example
// "blk.0.attn_q.weight"). Weights to be trained must be F32, and the model
// loaded with NoMmap (a mapped file is read-only).
func (m *Model) Weight(name string) (*Param, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	p, err := newParam(name, C.llama_model_get_tensor_by_name(m.m, cn))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.path, err)
	}
	return p, nil
}

// WeightShape returns a model weight's shape (any type) by its GGUF name.
func (m *Model) WeightShape(name string) ([]int64, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	t := C.llama_model_get_tensor_by_name(m.m, cn)
	if t == nil {
		return nil, fmt.Errorf("%s: no tensor %q", m.path, name)
	}
	var shape []int64
	for i := 0; i < int(C.ggml_n_dims(t)); i++ {
		shape = append(shape, int64(t.ne[i]))
	}
	return shape, nil
}

// Tensor returns one of the adapter's LoRA matrices by name
// ("blk.0.attn_q.weight.lora_a" or ".lora_b").
func (a *Adapter) Tensor(name string) (*Param, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	p, err := newParam(name, C.llama_adapter_lora_get_tensor(a.a, cn))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.path, err)
	}
	return p, nil
}

// PGSeq is one sequence of a policy-gradient micro-batch: prompt tokens
// followed by completion tokens, and the weight of each completion token in
// the loss.
type PGSeq struct {
	Tokens  []Token
	NPrompt int
	Weight  float32
	// TokenWeights, when not nil, gives each completion token its own weight
	// (len(Tokens)-NPrompt of them) and Weight is ignored: the clipped
	// objective and the KL penalty weigh tokens one by one.
	TokenWeights []float32
}

// ComputeBufferBytes is the size of the context's compute buffers over every
// backend: what the largest graph computed so far needed (they only grow).
// After PGEval with params, the training graph's activations and gradients.
func (c *Context) ComputeBufferBytes() int64 {
	if c == nil || c.c == nil {
		return 0
	}
	return int64(C.llama_context_compute_buffer_size(c.c))
}

// PGEval runs the model on seqs packed into one micro-batch, without the KV
// cache, and evaluates L = -sum_i Weight_i * sum_t log p(completion token t)
// (or -sum_i sum_t TokenWeights_i[t] * log p where token weights are given).
// With params it also runs the backward pass and writes dL/dparam into grads
// (one slice of Len() values per param). It returns L and the log-probability
// of every completion token, sequences in order. The context must have been
// created with TrainingGraphs and a micro-batch (NUBatch) that holds all the
// tokens.
func (c *Context) PGEval(seqs []PGSeq, params []*Param, grads [][]float32) (loss float64, logprobs []float32, err error) {
	if len(seqs) == 0 {
		return 0, nil, errors.New("llama: PGEval of no sequences")
	}
	if len(grads) != len(params) {
		return 0, nil, fmt.Errorf("llama: %d gradient buffers for %d params", len(grads), len(params))
	}
	nComp := 0
	for i, s := range seqs {
		if s.NPrompt < 1 || len(s.Tokens) <= s.NPrompt {
			return 0, nil, fmt.Errorf("llama: sequence %d: %d tokens with %d prompt tokens (need a prompt and a completion)", i, len(s.Tokens), s.NPrompt)
		}
		if s.TokenWeights != nil && len(s.TokenWeights) != len(s.Tokens)-s.NPrompt {
			return 0, nil, fmt.Errorf("llama: sequence %d: %d token weights for %d completion tokens", i, len(s.TokenWeights), len(s.Tokens)-s.NPrompt)
		}
		nComp += len(s.Tokens) - s.NPrompt
	}
	for j, p := range params {
		if len(grads[j]) != p.Len() {
			return 0, nil, fmt.Errorf("llama: gradient buffer of %s has %d values, want %d", p.Name, len(grads[j]), p.Len())
		}
	}
	// Everything handed to C lives in C memory for the call.
	cs := (*C.struct_llama_pg_seq)(C.malloc(C.size_t(len(seqs)) * C.sizeof_struct_llama_pg_seq))
	defer C.free(unsafe.Pointer(cs))
	csl := unsafe.Slice(cs, len(seqs))
	var toks []unsafe.Pointer
	defer func() {
		for _, p := range toks {
			C.free(p)
		}
	}()
	for i, s := range seqs {
		p := C.malloc(C.size_t(4 * len(s.Tokens)))
		toks = append(toks, p)
		copy(unsafe.Slice((*Token)(p), len(s.Tokens)), s.Tokens)
		csl[i] = C.struct_llama_pg_seq{tokens: (*C.llama_token)(p), n_tokens: C.int32_t(len(s.Tokens)), n_prompt: C.int32_t(s.NPrompt), weight: C.float(s.Weight)}
		if s.TokenWeights != nil {
			w := C.malloc(C.size_t(4 * len(s.TokenWeights)))
			toks = append(toks, w)
			copy(unsafe.Slice((*float32)(w), len(s.TokenWeights)), s.TokenWeights)
			csl[i].token_weights = (*C.float)(w)
		}
	}
	var cparams **C.struct_ggml_tensor
	var cgrads **C.float
	if len(params) > 0 {
		cparams = (**C.struct_ggml_tensor)(C.malloc(C.size_t(len(params)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		defer C.free(unsafe.Pointer(cparams))
		cgrads = (**C.float)(C.malloc(C.size_t(len(params)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		defer C.free(unsafe.Pointer(cgrads))
		pl := unsafe.Slice(cparams, len(params))
		gl := unsafe.Slice(cgrads, len(params))
		for j, p := range params {
			pl[j] = p.t
			gp := (*C.float)(C.malloc(C.size_t(4 * p.Len())))
			gl[j] = gp
			defer C.free(unsafe.Pointer(gp))
		}
	}
	lp := (*C.float)(C.malloc(C.size_t(4 * nComp)))
	defer C.free(unsafe.Pointer(lp))
	var closs C.double
	c.profStart()
	var rc C.int32_t
	msg := call(func() {
		rc = C.llama_pg_eval(c.c, cs, C.int32_t(len(seqs)), cparams, C.int32_t(len(params)), cgrads, &closs, lp)
	})
	if rc != 0 {
		return 0, nil, fmt.Errorf("llama: %s", because(fmt.Sprintf("training evaluation failed (%d)", int(rc)), msg))
	}
	if len(params) > 0 {
		gl := unsafe.Slice(cgrads, len(params))
		for j, p := range params {
			copy(grads[j], unsafe.Slice((*float32)(unsafe.Pointer(gl[j])), p.Len()))
		}
	}
	logprobs = make([]float32, nComp)
	copy(logprobs, unsafe.Slice((*float32)(unsafe.Pointer(lp)), nComp))
	return float64(closs), logprobs, nil
}

// CanTrain returns nil when PGEval can train the model's architecture, or an
// error saying why not (recurrent or hybrid memory, a diffusion or
// encoder-decoder model, layers that reuse another layer's KV cache). An op
// of the architecture's graph without a backward pass is found later, by
// PGEval, with the op's name.
func (m *Model) CanTrain() error {
	if why := C.llama_model_training_unsupported(m.m); why != nil {
		return fmt.Errorf("%s: the %s architecture cannot be trained: %s", m.path, m.Architecture(), C.GoString(why))
	}
	return nil
}
