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
	"math"
	"slices"
	"unsafe"
)

// Param is a trainable tensor: a model weight (full-parameter training) or a
// LoRA matrix of an adapter. Its data lives in llama.cpp's buffers; Get and
// Set copy it out and back. It holds its owner (the model or adapter), so
// the tensor is not freed while the Param is in use; after the owner's Close
// its methods return ErrClosed.
type Param struct {
	Name  string
	Shape []int64 // ggml order, ne0 first
	t     *C.struct_ggml_tensor
	owner owner
	n     int
}

// owner is the handle whose C memory holds a Param's tensor: a call that
// reads or writes the tensor is a call on it (enter, exit), so its Close
// waits for the call.
type owner interface {
	enter() bool
	exit()
}

func newParam(name string, t *C.struct_ggml_tensor, o owner) (*Param, error) {
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
	return &Param{Name: name, Shape: shape, t: t, owner: o, n: int(C.ggml_nelements(t))}, nil
}

// Len is the number of values.
func (p *Param) Len() int { return p.n }

// Get copies the tensor's values into dst (len(dst) == Len()).
func (p *Param) Get(dst []float32) error {
	if len(dst) != p.n {
		return fmt.Errorf("llama: Param.Get of %s into %d values, want %d", p.Name, len(dst), p.n)
	}
	if !p.owner.enter() {
		return ErrClosed
	}
	defer p.owner.exit()
	C.ggml_backend_tensor_get(p.t, unsafe.Pointer(&dst[0]), 0, C.size_t(4*len(dst)))
	return nil
}

// Set copies src into the tensor (len(src) == Len()).
func (p *Param) Set(src []float32) error {
	if len(src) != p.n {
		return fmt.Errorf("llama: Param.Set of %s from %d values, want %d", p.Name, len(src), p.n)
	}
	if !p.owner.enter() {
		return ErrClosed
	}
	defer p.owner.exit()
	C.ggml_backend_tensor_set(p.t, unsafe.Pointer(&src[0]), 0, C.size_t(4*len(src)))
	return nil
}

// Weight returns a model weight by its GGUF name (for example
// "blk.0.attn_q.weight"). Weights to be trained must be F32, and the model
// loaded with NoMmap (a mapped file is read-only). Training writes the
// weight: a model being trained is not read-only, so no other goroutine may
// use it meanwhile.
func (m *Model) Weight(name string) (*Param, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var p *Param
	var err error
	if e := m.with(func(cm *C.struct_llama_model) { p, err = newParam(name, C.llama_model_get_tensor_by_name(cm, cn), m) }); e != nil {
		return nil, e
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.path, err)
	}
	return p, nil
}

// WeightShape returns a model weight's shape (any type) by its GGUF name.
func (m *Model) WeightShape(name string) ([]int64, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var shape []int64
	found := false
	if err := m.with(func(cm *C.struct_llama_model) {
		t := C.llama_model_get_tensor_by_name(cm, cn)
		if t == nil {
			return
		}
		found = true
		for i := 0; i < int(C.ggml_n_dims(t)); i++ {
			shape = append(shape, int64(t.ne[i]))
		}
	}); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%s: no tensor %q", m.path, name)
	}
	return shape, nil
}

// Tensor returns one of the adapter's LoRA matrices by name
// ("blk.0.attn_q.weight.lora_a" or ".lora_b").
func (a *Adapter) Tensor(name string) (*Param, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var p *Param
	var err error
	if e := a.with(func(ca *C.struct_llama_adapter_lora) {
		p, err = newParam(name, C.llama_adapter_lora_get_tensor(ca, cn), a)
	}); e != nil {
		return nil, e
	}
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
	// EntropyWeights, when not nil, weighs each completion token's entropy
	// H(p_t) = -sum_v p_tv log p_tv in the loss, which gains
	// -sum_t EntropyWeights[t] * H(p_t) (an entropy bonus for positive
	// weights); len(Tokens)-NPrompt of them.
	EntropyWeights []float32
	// Shared, when positive, says that the first Shared tokens are the
	// previous sequence's (the same tokens; at most NPrompt-1, so that each
	// sequence keeps its last prompt token, whose logits predict its first
	// completion token): they are in the micro-batch once, computed once,
	// and both sequences attend to them. A group's G completions share their
	// prompt so. 0 for the first sequence.
	Shared int
	// Temperature T, when neither 0 nor 1, takes the log-probs, the entropy
	// and the loss of softmax(z/T) of the logits z, the distribution a
	// sampler draws from at temperature T (TRL and verl train so); 0 is 1,
	// the model's own.
	Temperature float32
}

// ComputeBufferBytes is the size of the context's compute buffers over every
// backend: what the largest graph computed so far needed (they only grow).
// After PGEval with params, the training graph's activations and gradients.
// It is 0 on a closed context.
func (c *Context) ComputeBufferBytes() int64 {
	var n int64
	c.do(func(cc *C.struct_llama_context) { n = int64(C.llama_context_compute_buffer_size(cc)) })
	return n
}

// SetQuantizedBackward makes PGEval's backward product through each frozen
// quantized weight W (the gradient into the activations, W^T dY) a matrix
// product through a Q8_0 copy of W^T in the CPU's integer dot products,
// instead of an F32 product over W dequantized (patch 0060). The copies are
// made on the first PGEval that needs them, about 1.06 bytes a weight
// (QuantizedBackwardBytes), and kept until Close. It changes nothing on a
// context that may run on a GPU. The gradients differ by Q8_0's rounding.
func (c *Context) SetQuantizedBackward(on bool) {
	c.do(func(cc *C.struct_llama_context) { C.llama_pg_set_quantized_backward(cc, C.bool(on)) })
}

// QuantizedBackwardBytes is the size of the Q8_0 copies of W^T that
// SetQuantizedBackward's products have made so far; 0 on a closed context.
func (c *Context) QuantizedBackwardBytes() int64 {
	var n int64
	c.do(func(cc *C.struct_llama_context) { n = int64(C.llama_pg_quantized_backward_size(cc)) })
	return n
}

// PGEval runs the model on seqs packed into one micro-batch, without the KV
// cache, and evaluates L = -sum_i Weight_i * sum_t log p(completion token t)
// (or -sum_i sum_t TokenWeights_i[t] * log p where token weights are given),
// minus sum_i sum_t EntropyWeights_i[t] * H(p_t) where entropy weights are,
// p at each sequence's Temperature.
// With params it also runs the backward pass and writes dL/dparam into grads
// (one slice of Len() values per param). It returns L and the log-probability
// of every completion token, sequences in order. The context must have been
// created with TrainingGraphs and a micro-batch (NUBatch) that holds all the
// tokens.
//
// It marks params as trainable in the model's graph while it runs: no other
// goroutine may compute with the same model meanwhile.
func (c *Context) PGEval(seqs []PGSeq, params []*Param, grads [][]float32) (loss float64, logprobs []float32, err error) {
	if c.closed() {
		return 0, nil, ErrClosed
	}
	if len(grads) != len(params) {
		return 0, nil, fmt.Errorf("llama: %d gradient buffers for %d params", len(grads), len(params))
	}
	nComp, err := checkPGSeqs(seqs)
	if err != nil {
		return 0, nil, err
	}
	for j, p := range params {
		// The pass reads and writes the tensor: a call on its owner.
		if !p.owner.enter() {
			return 0, nil, fmt.Errorf("llama: param %s: %w", p.Name, ErrClosed)
		}
		defer p.owner.exit()
		if len(grads[j]) != p.Len() {
			return 0, nil, fmt.Errorf("llama: gradient buffer of %s has %d values, want %d", p.Name, len(grads[j]), p.Len())
		}
	}
	// The arrays handed to C are Go memory holding only C pointers (cgo
	// allows passing them); what they point to is C memory, freed on return.
	var cmem []unsafe.Pointer
	defer func() {
		for _, p := range cmem {
			C.free(p)
		}
	}()
	cbytes := func(p unsafe.Pointer, n int) unsafe.Pointer {
		q := C.CBytes(unsafe.Slice((*byte)(p), n))
		cmem = append(cmem, q)
		return q
	}
	cs := make([]C.struct_llama_pg_seq, len(seqs))
	for i, s := range seqs {
		cs[i] = C.struct_llama_pg_seq{
			tokens:   (*C.llama_token)(cbytes(unsafe.Pointer(&s.Tokens[0]), 4*len(s.Tokens))),
			n_tokens: C.int32_t(len(s.Tokens)), n_prompt: C.int32_t(s.NPrompt), weight: C.float(s.Weight),
			n_shared: C.int32_t(s.Shared), temperature: C.float(s.Temperature),
		}
		if s.TokenWeights != nil {
			cs[i].token_weights = (*C.float)(cbytes(unsafe.Pointer(&s.TokenWeights[0]), 4*len(s.TokenWeights)))
		}
		if s.EntropyWeights != nil {
			cs[i].entropy_weights = (*C.float)(cbytes(unsafe.Pointer(&s.EntropyWeights[0]), 4*len(s.EntropyWeights)))
		}
	}
	var cparams **C.struct_ggml_tensor
	var cgrads **C.float
	gl := make([]*C.float, len(params))
	if len(params) > 0 {
		pl := make([]*C.struct_ggml_tensor, len(params))
		for j, p := range params {
			pl[j] = p.t
			gl[j] = (*C.float)(C.malloc(C.size_t(4 * p.Len())))
			cmem = append(cmem, unsafe.Pointer(gl[j]))
		}
		cparams, cgrads = &pl[0], &gl[0]
	}
	logprobs = make([]float32, nComp)
	var closs C.double
	c.profStart()
	var rc C.int32_t
	var msg string
	if err := c.with(func(cc *C.struct_llama_context) {
		msg = call(func() {
			rc = C.llama_pg_eval(cc, &cs[0], C.int32_t(len(seqs)), cparams, C.int32_t(len(params)), cgrads, &closs, (*C.float)(unsafe.Pointer(&logprobs[0])))
		})
	}); err != nil {
		return 0, nil, err
	}
	if rc != 0 {
		return 0, nil, fmt.Errorf("llama: %s", because(fmt.Sprintf("training evaluation failed (%d)", int(rc)), msg))
	}
	for j, p := range params {
		copy(grads[j], unsafe.Slice((*float32)(unsafe.Pointer(gl[j])), p.Len()))
	}
	return float64(closs), logprobs, nil
}

// checkPGSeqs checks PGEval's sequences before llama.cpp sees them (their
// prompts and completions, weights, temperatures and shared prefixes) and
// counts their completion tokens.
func checkPGSeqs(seqs []PGSeq) (int, error) {
	if len(seqs) == 0 {
		return 0, errors.New("llama: PGEval of no sequences")
	}
	nComp := 0
	for i, s := range seqs {
		if s.NPrompt < 1 || len(s.Tokens) <= s.NPrompt {
			return 0, fmt.Errorf("llama: sequence %d: %d tokens with %d prompt tokens (need a prompt and a completion)", i, len(s.Tokens), s.NPrompt)
		}
		if s.TokenWeights != nil && len(s.TokenWeights) != len(s.Tokens)-s.NPrompt {
			return 0, fmt.Errorf("llama: sequence %d: %d token weights for %d completion tokens", i, len(s.TokenWeights), len(s.Tokens)-s.NPrompt)
		}
		if s.EntropyWeights != nil && len(s.EntropyWeights) != len(s.Tokens)-s.NPrompt {
			return 0, fmt.Errorf("llama: sequence %d: %d entropy weights for %d completion tokens", i, len(s.EntropyWeights), len(s.Tokens)-s.NPrompt)
		}
		if t := float64(s.Temperature); t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
			return 0, fmt.Errorf("llama: sequence %d: temperature %g, want 0 (for 1) or a positive finite number", i, t)
		}
		if s.Shared != 0 {
			most := 0
			if i > 0 {
				most = min(s.NPrompt-1, len(seqs[i-1].Tokens))
			}
			if s.Shared < 0 || s.Shared > most {
				return 0, fmt.Errorf("llama: sequence %d: %d tokens shared with the previous sequence, at most %d", i, s.Shared, most)
			}
			if !slices.Equal(s.Tokens[:s.Shared], seqs[i-1].Tokens[:s.Shared]) {
				return 0, fmt.Errorf("llama: sequence %d: its %d shared tokens differ from the previous sequence's", i, s.Shared)
			}
		}
		nComp += len(s.Tokens) - s.NPrompt
	}
	return nComp, nil
}

// CanTrain returns nil when PGEval can train the model's architecture, or an
// error saying why not (recurrent or hybrid memory, a diffusion or
// encoder-decoder model, layers that reuse another layer's KV cache). An op
// of the architecture's graph without a backward pass is found later, by
// PGEval, with the op's name.
func (m *Model) CanTrain() error {
	var why *C.char
	if err := m.with(func(cm *C.struct_llama_model) { why = C.llama_model_training_unsupported(cm) }); err != nil {
		return err
	}
	if why != nil {
		return fmt.Errorf("%s: the %s architecture cannot be trained: %s", m.path, m.Architecture(), C.GoString(why))
	}
	return nil
}
