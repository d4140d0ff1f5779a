package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/confclip/confclip/llama"
)

// Loss aggregations (METHOD.md "Loss for the training step").
const (
	TokenMean           = "token_mean"              // Z = sum_i T_i (DAPO)
	SeqMeanTokenMean    = "seq_mean_token_mean"     // per sequence / T_i, then / G (GRPO)
	SeqMeanTokenSumNorm = "seq_mean_token_sum_norm" // Z = G * max_tokens (Dr. GRPO)
)

// Config is the optimiser and batching setup.
type Config struct {
	LR          float64 // AdamW learning rate
	Beta1       float64
	Beta2       float64
	Eps         float64
	WeightDecay float64 // decoupled, as AdamW
	GradClip    float64 // clip the global gradient norm to this; 0 = off
	LossAgg     string
	MaxTokens   int // the rollout's completion limit (seq_mean_token_sum_norm)
	// MicroBatchTokens bounds the tokens evaluated at once (memory); the
	// step accumulates gradients over as many micro-batches as it needs.
	MicroBatchTokens int
	Threads          int
}

// DefaultConfig is AdamW with lr 1e-4, clipping at 1, token_mean.
func DefaultConfig() Config {
	return Config{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, GradClip: 1, LossAgg: TokenMean, MicroBatchTokens: 512}
}

// Example is one completion to learn from.
type Example struct {
	Prompt     []llama.Token
	Completion []llama.Token
	Advantage  float64
}

// StepStats describes one training step.
type StepStats struct {
	Loss         float64 `json:"loss"`      // L of METHOD.md (before the update)
	GradNorm     float64 `json:"grad_norm"` // global L2 norm before clipping
	Clipped      bool    `json:"clipped"`
	Sequences    int     `json:"sequences"`
	Tokens       int     `json:"tokens"` // completion tokens
	AllTokens    int     `json:"all_tokens"`
	MicroBatches int     `json:"micro_batches"`
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_s"` // all tokens (prompt and completion) through forward+backward
}

// Trainer owns a training context and the AdamW state of its parameters.
// It is used by one goroutine at a time.
type Trainer struct {
	cfg    Config
	model  *llama.Model
	ctx    *llama.Context
	params []*llama.Param
	values [][]float32 // current parameter values (mirrors llama.cpp's)
	grads  [][]float32 // this step's gradient
	mgrad  [][]float32 // per micro-batch gradient buffer
	m, v   [][]float32 // AdamW moments
	step   int64
}

// NewLoRATrainer trains the adapter's A and B matrices. The adapter must have
// been loaded for the model; it is applied to the trainer's own context.
func NewLoRATrainer(m *llama.Model, a *llama.Adapter, cfg Config) (*Trainer, error) {
	ps, _, err := AdapterParams(a)
	if err != nil {
		return nil, err
	}
	t, err := newTrainer(m, ps, cfg)
	if err != nil {
		return nil, err
	}
	if err := t.ctx.SetAdapter(a, 1); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// NewFullTrainer trains every weight of an F32 model (the model must be
// loaded with NoMmap, since a mapped file is read-only).
func NewFullTrainer(m *llama.Model, weights []string, cfg Config) (*Trainer, error) {
	var ps []*llama.Param
	for _, name := range weights {
		p, err := m.Weight(name)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return newTrainer(m, ps, cfg)
}

func newTrainer(m *llama.Model, ps []*llama.Param, cfg Config) (*Trainer, error) {
	if err := m.CanTrain(); err != nil {
		return nil, err
	}
	switch cfg.LossAgg {
	case TokenMean, SeqMeanTokenMean:
	case SeqMeanTokenSumNorm:
		if cfg.MaxTokens <= 0 {
			return nil, errors.New("loss aggregation seq_mean_token_sum_norm needs the rollout's max tokens")
		}
	default:
		return nil, fmt.Errorf("unknown loss aggregation %q (want %s, %s or %s)", cfg.LossAgg, TokenMean, SeqMeanTokenMean, SeqMeanTokenSumNorm)
	}
	if cfg.LR <= 0 || cfg.Beta1 < 0 || cfg.Beta1 >= 1 || cfg.Beta2 < 0 || cfg.Beta2 >= 1 || cfg.Eps <= 0 || cfg.WeightDecay < 0 || cfg.GradClip < 0 {
		return nil, fmt.Errorf("invalid optimiser settings %+v", cfg)
	}
	if cfg.MicroBatchTokens <= 0 {
		cfg.MicroBatchTokens = 512
	}
	nctx := (cfg.MicroBatchTokens + 255) / 256 * 256 // llama.cpp pads n_ctx to 256
	ctx, err := llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: nctx, NUBatch: nctx, NSeqMax: 1,
		Threads: cfg.Threads, FlashAttn: "off", TrainingGraphs: true})
	if err != nil {
		return nil, err
	}
	cfg.MicroBatchTokens = nctx
	t := &Trainer{cfg: cfg, model: m, ctx: ctx, params: ps}
	for _, p := range ps {
		n := p.Len()
		v := make([]float32, n)
		p.Get(v)
		t.values = append(t.values, v)
		t.grads = append(t.grads, make([]float32, n))
		t.mgrad = append(t.mgrad, make([]float32, n))
		t.m = append(t.m, make([]float32, n))
		t.v = append(t.v, make([]float32, n))
	}
	return t, nil
}

// Close frees the training context.
func (t *Trainer) Close() { t.ctx.Close() }

// Params are the trained tensors.
func (t *Trainer) Params() []*llama.Param { return t.params }

// Config is the trainer's configuration (with MicroBatchTokens as used).
func (t *Trainer) Config() Config { return t.cfg }

// weights gives each example's per-token loss weight w_i = A_i / Z_i, so
// that L = -sum_i w_i sum_t log p (METHOD.md).
func (t *Trainer) weights(exs []Example) []float64 {
	w := make([]float64, len(exs))
	g := float64(len(exs))
	total := 0
	for _, e := range exs {
		total += len(e.Completion)
	}
	for i, e := range exs {
		switch t.cfg.LossAgg {
		case TokenMean:
			w[i] = e.Advantage / float64(total)
		case SeqMeanTokenMean:
			w[i] = e.Advantage / (float64(len(e.Completion)) * g)
		case SeqMeanTokenSumNorm:
			w[i] = e.Advantage / (g * float64(t.cfg.MaxTokens))
		}
	}
	return w
}

// microBatches packs examples, in order, into micro-batches of at most
// MicroBatchTokens tokens.
func (t *Trainer) microBatches(exs []Example, w []float64) ([][]llama.PGSeq, error) {
	var out [][]llama.PGSeq
	var cur []llama.PGSeq
	n := 0
	nv := t.model.NVocab()
	for i, e := range exs {
		if len(e.Prompt) == 0 || len(e.Completion) == 0 {
			return nil, fmt.Errorf("example %d: needs prompt and completion tokens (%d and %d)", i+1, len(e.Prompt), len(e.Completion))
		}
		if math.IsNaN(e.Advantage) || math.IsInf(e.Advantage, 0) {
			return nil, fmt.Errorf("example %d: advantage %v is not finite", i+1, e.Advantage)
		}
		toks := make([]llama.Token, 0, len(e.Prompt)+len(e.Completion))
		toks = append(append(toks, e.Prompt...), e.Completion...)
		for _, tok := range toks {
			if tok < 0 || int(tok) >= nv {
				return nil, fmt.Errorf("example %d: token %d outside the model's vocabulary (size %d): wrong model?", i+1, tok, nv)
			}
		}
		if len(toks) > t.cfg.MicroBatchTokens {
			return nil, fmt.Errorf("example %d: %d tokens exceed the micro-batch of %d tokens (raise the micro-batch)", i+1, len(toks), t.cfg.MicroBatchTokens)
		}
		if n+len(toks) > t.cfg.MicroBatchTokens {
			out = append(out, cur)
			cur, n = nil, 0
		}
		cur = append(cur, llama.PGSeq{Tokens: toks, NPrompt: len(e.Prompt), Weight: float32(w[i])})
		n += len(toks)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// Gradient evaluates the loss and its gradient over all examples (summed over
// micro-batches) without changing the parameters. The gradient is in
// Grads() until the next call.
func (t *Trainer) Gradient(ctx context.Context, exs []Example) (StepStats, error) {
	start := time.Now()
	if len(exs) == 0 {
		return StepStats{}, errors.New("no training examples")
	}
	w := t.weights(exs)
	mbs, err := t.microBatches(exs, w)
	if err != nil {
		return StepStats{}, err
	}
	for _, g := range t.grads {
		clear(g)
	}
	st := StepStats{Sequences: len(exs), MicroBatches: len(mbs)}
	for _, mb := range mbs {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		loss, _, err := t.ctx.PGEval(mb, t.params, t.mgrad)
		if err != nil {
			return st, err
		}
		st.Loss += loss
		for j, g := range t.mgrad {
			acc := t.grads[j]
			for k, v := range g {
				acc[k] += v
			}
		}
		for _, s := range mb {
			st.Tokens += len(s.Tokens) - s.NPrompt
			st.AllTokens += len(s.Tokens)
		}
	}
	var sq float64
	for _, g := range t.grads {
		for _, v := range g {
			sq += float64(v) * float64(v)
		}
	}
	st.GradNorm = math.Sqrt(sq)
	st.Seconds = time.Since(start).Seconds()
	if st.Seconds > 0 {
		st.TokensPerSec = float64(st.AllTokens) / st.Seconds
	}
	return st, nil
}

// Grads is the gradient of the last Gradient or Step call, one slice per param.
func (t *Trainer) Grads() [][]float32 { return t.grads }

// Step runs one optimiser step on the examples: the gradient of METHOD.md's
// loss accumulated over micro-batches, clipped to GradClip by global norm,
// then AdamW (decoupled weight decay) on the parameters.
func (t *Trainer) Step(ctx context.Context, exs []Example) (StepStats, error) {
	start := time.Now()
	st, err := t.Gradient(ctx, exs)
	if err != nil {
		return st, err
	}
	scale := 1.0
	if t.cfg.GradClip > 0 && st.GradNorm > t.cfg.GradClip {
		scale = t.cfg.GradClip / st.GradNorm
		st.Clipped = true
	}
	t.step++
	b1, b2 := t.cfg.Beta1, t.cfg.Beta2
	c1 := 1 - math.Pow(b1, float64(t.step))
	c2 := 1 - math.Pow(b2, float64(t.step))
	lr, eps, wd := t.cfg.LR, t.cfg.Eps, t.cfg.WeightDecay
	for j, p := range t.params {
		val, g, m, v := t.values[j], t.grads[j], t.m[j], t.v[j]
		for k := range val {
			gk := float64(g[k]) * scale
			mk := b1*float64(m[k]) + (1-b1)*gk
			vk := b2*float64(v[k]) + (1-b2)*gk*gk
			m[k], v[k] = float32(mk), float32(vk)
			upd := (mk / c1) / (math.Sqrt(vk/c2) + eps)
			val[k] = float32(float64(val[k]) - lr*(upd+wd*float64(val[k])))
		}
		p.Set(val)
	}
	st.Seconds = time.Since(start).Seconds()
	return st, nil
}

// LogProbs evaluates, without gradients, the log-probability of every
// completion token of each example under the current parameters.
func (t *Trainer) LogProbs(exs []Example) ([][]float32, error) {
	zero := make([]float64, len(exs))
	mbs, err := t.microBatches(exs, zero)
	if err != nil {
		return nil, err
	}
	var out [][]float32
	for _, mb := range mbs {
		_, lp, err := t.ctx.PGEval(mb, nil, nil)
		if err != nil {
			return nil, err
		}
		for _, s := range mb {
			n := len(s.Tokens) - s.NPrompt
			out = append(out, lp[:n])
			lp = lp[n:]
		}
	}
	return out, nil
}

// optimizerMagic starts a saved optimiser state.
const optimizerMagic = "confclip-adamw-v1"

// MarshalBinary saves the AdamW state (step count and moments) for a
// checkpoint; the parameter values are saved with the adapter.
func (t *Trainer) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(optimizerMagic)
	binary.Write(&b, binary.LittleEndian, t.step)
	binary.Write(&b, binary.LittleEndian, int64(len(t.params)))
	for j, p := range t.params {
		binary.Write(&b, binary.LittleEndian, int64(len(p.Name)))
		b.WriteString(p.Name)
		binary.Write(&b, binary.LittleEndian, int64(p.Len()))
		binary.Write(&b, binary.LittleEndian, t.m[j])
		binary.Write(&b, binary.LittleEndian, t.v[j])
	}
	return b.Bytes(), nil
}

// UnmarshalBinary restores a state saved by MarshalBinary for the same
// parameters.
func (t *Trainer) UnmarshalBinary(data []byte) error {
	r := bytes.NewReader(data)
	magic := make([]byte, len(optimizerMagic))
	if _, err := r.Read(magic); err != nil || string(magic) != optimizerMagic {
		return errors.New("optimizer state: not a confclip AdamW state")
	}
	var step, n int64
	if err := binary.Read(r, binary.LittleEndian, &step); err != nil {
		return fmt.Errorf("optimizer state: %w", err)
	}
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil || n != int64(len(t.params)) {
		return fmt.Errorf("optimizer state: %d tensors, the trainer has %d", n, len(t.params))
	}
	for j, p := range t.params {
		var ln, size int64
		if err := binary.Read(r, binary.LittleEndian, &ln); err != nil || ln < 0 || ln > 1024 {
			return errors.New("optimizer state: corrupt")
		}
		name := make([]byte, ln)
		r.Read(name)
		if string(name) != p.Name {
			return fmt.Errorf("optimizer state: tensor %q where %q was expected", name, p.Name)
		}
		if err := binary.Read(r, binary.LittleEndian, &size); err != nil || size != int64(p.Len()) {
			return fmt.Errorf("optimizer state: %s has %d values, want %d", p.Name, size, p.Len())
		}
		if err := binary.Read(r, binary.LittleEndian, t.m[j]); err != nil {
			return fmt.Errorf("optimizer state: %w", err)
		}
		if err := binary.Read(r, binary.LittleEndian, t.v[j]); err != nil {
			return fmt.Errorf("optimizer state: %w", err)
		}
	}
	t.step = step
	return nil
}

// SyncFromModel re-reads the parameter values from llama.cpp (after an
// adapter was reloaded from a checkpoint, say).
func (t *Trainer) SyncFromModel() {
	for j, p := range t.params {
		p.Get(t.values[j])
	}
}

// F32Weights lists the model's trainable F32 weights for full-parameter
// training (every weight matrix and norm).
func F32Weights(path string) ([]string, error) {
	g, err := llama.OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	var names []string
	for _, ti := range g.Tensors() {
		if ti.Type != "f32" {
			return nil, fmt.Errorf("%s: tensor %s is %s; full-parameter training needs an all-F32 model", path, ti.Name, ti.Type)
		}
		if strings.HasSuffix(ti.Name, ".weight") {
			names = append(names, ti.Name)
		}
	}
	return names, nil
}
