package train

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/llama"
)

// Config is the [train] table: a new adapter's shape, the optimiser, the
// loss and the batching. Each key has its toml tag here, its default in
// DefaultConfig and its check in Checks; the fields without a tag come
// from other tables or from Go callers (pipeline sets them).
type Config struct {
	// A new adapter (CreateLoRA): its rank, alpha and the matrices it
	// adapts (a subset of Targets; empty = all).
	LoraRank    int      `toml:"lora_rank"`
	LoraAlpha   float64  `toml:"lora_alpha"`
	Targets     []string `toml:"targets"`
	LR          float64  `toml:"lr"` // AdamW learning rate
	Beta1       float64  `toml:"beta1"`
	Beta2       float64  `toml:"beta2"`
	Eps         float64  `toml:"eps"`
	WeightDecay float64  `toml:"weight_decay"` // decoupled, as AdamW
	GradClip    float64  `toml:"grad_clip"`    // clip the global gradient norm to this; 0 = off
	// LossAgg is token_mean, seq_mean_token_mean or
	// seq_mean_token_sum_norm (or grpo, bnpo, dr_grpo, dapo: ParseAggregation).
	LossAgg string `toml:"loss_agg"`
	// Iterations is mu, the updates Update makes on one batch (0 = 1).
	Iterations int `toml:"iterations"`
	// Epsilon and EpsilonHigh bound the importance ratio to
	// [1-Epsilon, 1+EpsilonHigh] (PPO's clip; DAPO's clip-higher);
	// EpsilonHigh 0 = Epsilon.
	Epsilon     float64 `toml:"epsilon"`
	EpsilonHigh float64 `toml:"epsilon_high"`
	// Beta weighs the k3 KL to the reference (the base model without the
	// adapter); 0 = no KL term and no reference forward.
	Beta float64 `toml:"beta"`
	// EntropyCoef adds -EntropyCoef times the completion tokens' entropy,
	// aggregated as the policy-gradient term is (each token's H(p) with its
	// sequence's factor z_i), to the loss: verl's entropy_coeff, an entropy
	// bonus for positive values. 0 = no term, and the graph without it.
	EntropyCoef float64 `toml:"entropy_coef"`
	// Temperature T takes the log-probs, the entropy and the loss of
	// softmax(z/T), the distribution the rollout sampled from at
	// temperature T, as TRL's GRPOTrainer and verl do; 0 or 1 = the model's
	// own (the graph without the scaling).
	Temperature float64 `toml:"temperature"`
	// Schedule (constant, linear, cosine) and WarmupSteps shape the
	// learning rate over the updates; TotalSteps is the number of updates
	// the decays end at (a run's steps times Iterations).
	Schedule    string `toml:"schedule"`
	WarmupSteps int    `toml:"warmup_steps"`
	// MicroBatch bounds the tokens packed into one forward-backward pass
	// (its activations are the step's memory); the step accumulates
	// gradients over as many micro-batches as it needs, and a longer
	// sequence runs alone. 0 = AutoMicroBatch, sized from Memory.
	MicroBatch int `toml:"micro_batch"`
	// Memory is the memory a pass's activations may take ("2GiB",
	// ParseBytes), which sizes the default micro-batch; "" = MemoryShare
	// of the memory free where the pass runs (MemoryBudget).
	Memory string `toml:"memory"`
	// QuantizedBackward runs the backward product through each frozen
	// quantized weight (the gradient into the activations) in the CPU's
	// integer dot products, through a Q8_0 copy of the weight's transpose
	// (llama.Context.SetQuantizedBackward), instead of in F32 over the
	// weight dequantized; the gradients move by Q8_0's rounding. Off by
	// default: on an Intel Xeon with AVX-512 the Q8_0 product runs at the
	// F32 one's rate and the step is slower (docs/speed.md); a CPU whose
	// integer dot products outrun its F32 FMAs may gain
	// (BenchmarkQuantizedBackward says). The copies (about 1.06 bytes a
	// weight) come out of the default micro-batch's budget. No effect on a
	// GPU or on F32/F16 weights.
	QuantizedBackward bool `toml:"quantized_backward"`
	// Seed draws a new adapter's A (CreateLoRA).
	Seed uint64 `toml:"seed"`

	// MaxTokens is the rollout's completion limit (seq_mean_token_sum_norm).
	MaxTokens  int `toml:"-"`
	Threads    int `toml:"-"`
	TotalSteps int `toml:"-"`
	// Profile times every ggml op of the training context (Trainer.Profile).
	Profile bool `toml:"-"`
	// UnsharedPrompts gives every sequence its own prompt in a pass. By
	// default a sequence packed after one with the same leading prompt
	// tokens (a group's G completions of one prompt) shares them
	// (llama.PGSeq.Shared): computed once, attended by both, the gradient
	// the same up to rounding.
	UnsharedPrompts bool `toml:"-"`
	// keepZeroWeight evaluates the sequences that carry no gradient too
	// (the tests' plain path, to compare the skip against).
	keepZeroWeight bool
}

// DefaultConfig is the [train] table's defaults: a rank-8 adapter on every
// target, AdamW with lr 1e-4, clipping at 1, token_mean, the micro-batch
// sized from the memory free, and TRL's ratio clip band [0.8, 1.2]
// (EpsilonHigh 0 = Epsilon). A zero-width band would clip every ratio off
// exactly 1, by the sign of float noise.
func DefaultConfig() Config {
	return Config{LoraRank: 8, LoraAlpha: 16, Targets: slices.Clone(Targets), LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		GradClip: 1, LossAgg: TokenMean, Iterations: 1, Epsilon: 0.2, Schedule: "constant", Temperature: 1}
}

// Example is one completion to learn from.
type Example struct {
	Prompt     []llama.Token
	Completion []llama.Token
	Advantage  float64
	// Masked leaves the completion out of the loss and out of its
	// denominators (advantage.mask_truncated).
	Masked bool
	// Mask, when given, has one entry per completion token: false leaves
	// that token out of the loss and out of the token counts of its
	// denominators (a tool's output inside a completion, say); the token
	// still conditions the ones after it. nil = every token.
	Mask []bool
	// OldLogProbs are the log-probabilities of the policy that sampled the
	// completion, for the importance ratio; nil means the current
	// parameters sampled it (the first update on fresh rollouts, ratio 1).
	OldLogProbs []float32
	// RefLogProbs are the reference model's (without the adapter), for the
	// KL term; Step fills them in when Beta > 0 and they are nil.
	RefLogProbs []float32
}

// StepStats describes one training step.
type StepStats struct {
	// Loss is what the training evaluation minimised, -sum_t w_t log p_t
	// with this update's token weights; its gradient is Objective's.
	Loss float64 `json:"loss"`
	// Objective is METHOD.md's L (clipped ratio and KL terms, aggregated)
	// at the parameters before the update; ClipFrac is the fraction of
	// unmasked completion tokens whose ratio was clipped, KL the mean k3 KL.
	Objective float64 `json:"objective"`
	ClipFrac  float64 `json:"clip_frac"`
	KL        float64 `json:"kl"`
	LR        float64 `json:"lr"`        // the learning rate of this update
	GradNorm  float64 `json:"grad_norm"` // global L2 norm before clipping
	Clipped   bool    `json:"clipped"`
	// Skipped: every advantage was zero (or every completion masked), so
	// nothing was evaluated and neither the adapter nor the optimiser's
	// moments moved.
	Skipped bool `json:"skipped"`
	// Forwards counts the gradient-free forward passes this update needed
	// besides the training evaluation (current log-probs for the ratio or
	// the KL; the reference's).
	Forwards     int `json:"forwards"`
	Sequences    int `json:"sequences"`
	Tokens       int `json:"tokens"` // completion tokens
	AllTokens    int `json:"all_tokens"`
	MicroBatches int `json:"micro_batches"`
	// SharedTokens counts the prompt tokens computed once for several
	// sequences: a sequence's leading tokens that the one before it in
	// its pass has (Config.UnsharedPrompts), a group's prompt. AllTokens
	// counts them for every sequence.
	SharedTokens int `json:"shared_tokens"`
	// ZeroWeight counts the sequences left out of every pass: without a
	// KL term, a sequence whose advantage is zero (or whose tokens are all
	// masked) has a loss of zero at every parameter, and so no gradient
	// (its ratio's clip never binds either); Tokens and AllTokens count
	// only the sequences that were evaluated.
	ZeroWeight   int     `json:"zero_weight_sequences"`
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_s"` // all tokens (prompt and completion) through forward+backward
	// LogProbs are the completion tokens' log-probabilities at the
	// parameters before the update, example by example; nil for a sequence
	// left out (ZeroWeight).
	LogProbs [][]float32 `json:"-"`
}

// Trainer owns a training context and the AdamW state of its parameters.
// It is used by one goroutine at a time.
type Trainer struct {
	cfg     Config
	agg     Aggregation // cfg.LossAgg parsed
	model   *llama.Model
	ctx     *llama.Context
	adapter *llama.Adapter // nil for full-parameter training
	// capacity is the tokens ctx holds in one pass (grow makes it larger)
	capacity int
	released int            // the capacity before Release, which grow restores; 0 when not released
	sizing   string         // how the micro-batch was chosen (Sizing)
	budget   int64          // the activations' budget that sized it (0: given)
	shape    Shape          // the model's, for each pass's estimate (PassBytes) within budget
	profPrev []llama.OpStat // profile totals of the contexts grow replaced
	params   []*llama.Param
	values   [][]float32 // current parameter values (mirrors llama.cpp's)
	grads    [][]float32 // this step's gradient
	mgrad    [][]float32 // per micro-batch gradient buffer
	m, v     [][]float32 // AdamW moments
	step     int64
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
	t.adapter = a
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
	// A Go caller's zero iterations and temperature are their defaults;
	// then the [train] table's own checks (Checks), the ones Validate runs.
	if cfg.Iterations <= 0 {
		cfg.Iterations = 1
	}
	if cfg.Temperature == 0 {
		cfg.Temperature = 1
	}
	if err := settings.Run(cfg, stepChecks()); err != nil {
		return nil, err
	}
	agg, err := ParseAggregation(cfg.LossAgg)
	if err != nil {
		return nil, err
	}
	cfg.LossAgg = agg.String()
	if agg == AggSeqMeanTokenSumNorm && cfg.MaxTokens <= 0 {
		return nil, errors.New("loss aggregation seq_mean_token_sum_norm needs the rollout's max tokens")
	}
	if cfg.EpsilonHigh == 0 {
		cfg.EpsilonHigh = cfg.Epsilon
	}
	if _, err := ScheduledLR(cfg.Schedule, cfg.LR, 1, cfg.WarmupSteps, cfg.TotalSteps); err != nil {
		return nil, err
	}
	memory, err := ParseBytes(cfg.Memory)
	if err != nil {
		return nil, err
	}
	var sizing string
	var budget int64
	shape := ModelShape(m)
	shape.Entropy = cfg.EntropyCoef != 0
	shape.Temperature = cfg.Temperature != 0 && cfg.Temperature != 1
	if cfg.MicroBatch <= 0 {
		b := MemoryBudget(m, memory)
		if c := quantizedBackwardBytes(m, cfg); c > 0 {
			b.Bytes = max(b.Bytes-c, MinActivationBudget)
			b.Source += fmt.Sprintf(", less %s for the Q8_0 copies of the weights the backward pass reads (train.quantized_backward)", FormatBytes(c))
		}
		budget = b.Bytes
		cfg.MicroBatch = AutoMicroBatch(shape, b.Bytes)
		n := cfg.MicroBatch
		sizing = fmt.Sprintf("micro-batch up to %d tokens: estimated activations %s (the attention's apart; each pass's, with its attention, kept) within a budget of %s (%s)",
			n, FormatBytes(activationBytes(shape, n, n, attention{})), FormatBytes(b.Bytes), b.Source)
		if n == MaxAutoMicroBatch {
			sizing += fmt.Sprintf(", at the cap of %d", MaxAutoMicroBatch)
		}
	} else {
		sizing = fmt.Sprintf("micro-batch %d tokens (train.micro_batch)", cfg.MicroBatch)
	}
	t := &Trainer{cfg: cfg, agg: agg, model: m, params: ps, capacity: contextTokens(min(cfg.MicroBatch, initialCapacity)), sizing: sizing, budget: budget, shape: shape}
	ctx, err := t.newContext(t.capacity)
	if err != nil {
		return nil, err
	}
	t.ctx = ctx
	for _, p := range ps {
		n := p.Len()
		v := make([]float32, n)
		if err := p.Get(v); err != nil {
			_ = ctx.Close() // never fails
			return nil, err
		}
		t.values = append(t.values, v)
		t.grads = append(t.grads, make([]float32, n))
		t.mgrad = append(t.mgrad, make([]float32, n))
		t.m = append(t.m, make([]float32, n))
		t.v = append(t.v, make([]float32, n))
	}
	return t, nil
}

// Sizing says how the micro-batch was chosen: the size, and for the
// default the estimated activations and the budget they fit.
func (t *Trainer) Sizing() string { return t.sizing }

// MemoryBudget is the activations' budget the default micro-batch was
// sized for; 0 when the micro-batch was given.
func (t *Trainer) MemoryBudget() int64 { return t.budget }

// Close frees the training context.
func (t *Trainer) Close() error { return t.ctx.Close() }

// Params are the trained tensors.
func (t *Trainer) Params() []*llama.Param { return t.params }

// Config is the trainer's configuration (with MicroBatch as used).
func (t *Trainer) Config() Config { return t.cfg }

// norms gives each example's factor z_i of the aggregation (0 for a masked
// one).
func (t *Trainer) norms(exs []Example) ([]float64, error) {
	lens, masked := make([]int, len(exs)), make([]bool, len(exs))
	for i, e := range exs {
		if e.Mask != nil && len(e.Mask) != len(e.Completion) {
			return nil, fmt.Errorf("example %d: a mask of %d entries for %d completion tokens", i+1, len(e.Mask), len(e.Completion))
		}
		lens[i], masked[i] = e.kept(), e.Masked
		masked[i] = masked[i] || lens[i] == 0
	}
	return SeqNorms(t.agg, lens, masked, t.cfg.MaxTokens)
}

// kept is the number of completion tokens the mask keeps.
func (e Example) kept() int {
	if e.Mask == nil {
		return len(e.Completion)
	}
	n := 0
	for _, k := range e.Mask {
		if k {
			n++
		}
	}
	return n
}

// masks are the examples' token masks, nil when none has one.
func masks(exs []Example) [][]bool {
	var m [][]bool
	for i, e := range exs {
		if e.Mask != nil {
			if m == nil {
				m = make([][]bool, len(exs))
			}
			m[i] = e.Mask
		}
	}
	return m
}

// weights gives each example's per-token loss weight on the first update of
// fresh rollouts without a KL term, w_i = A_i * z_i, so that
// L = -sum_i w_i sum_t log p (METHOD.md).
func (t *Trainer) weights(exs []Example) []float64 {
	z, err := t.norms(exs)
	w := make([]float64, len(exs))
	if err != nil {
		return w
	}
	for i, e := range exs {
		w[i] = e.Advantage * z[i]
	}
	return w
}

// microBatches packs examples, in order, into micro-batches of at most
// MicroBatch tokens (a longer sequence alone, the context grown to
// hold it), each sequence with its weight w[i] or, where tokenW[i] is
// given, its tokens' weights. Every example is checked; those with skip[i]
// are left out (skip may be nil).
func (t *Trainer) microBatches(exs []Example, w []float64, tokenW, entW [][]float32, skip []bool) ([][]llama.PGSeq, error) {
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
		if skip != nil && skip[i] {
			continue
		}
		seq := llama.PGSeq{Tokens: toks, NPrompt: len(e.Prompt), Temperature: float32(t.cfg.Temperature)}
		if len(cur) > 0 && !t.cfg.UnsharedPrompts {
			seq.Shared = sharedPrefix(cur[len(cur)-1].Tokens, toks, len(e.Prompt)-1)
		}
		if n > 0 && (n+len(toks)-seq.Shared > t.cfg.MicroBatch || len(cur) == maxPassSequences || !t.fits(cur, seq)) {
			out = append(out, cur)
			cur, n, seq.Shared = nil, 0, 0
		}
		if err := t.grow(n + len(toks) - seq.Shared); err != nil {
			return nil, fmt.Errorf("example %d: %w", i+1, err)
		}
		if w != nil {
			seq.Weight = float32(w[i])
		}
		if tokenW != nil {
			seq.TokenWeights = tokenW[i]
		}
		if entW != nil {
			seq.EntropyWeights = entW[i]
		}
		cur = append(cur, seq)
		n += len(toks) - seq.Shared
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// fits says whether a pass of cur and seq keeps within the activations'
// budget that sized the default micro-batch (PassBytes); a given
// micro-batch is bounded by its tokens only.
func (t *Trainer) fits(cur []llama.PGSeq, seq llama.PGSeq) bool {
	return t.budget <= 0 || PassBytes(t.shape, append(slices.Clip(cur), seq)) <= t.budget
}

// sharedPrefix is how many leading tokens b shares with a, at most most:
// the tokens a sequence takes from the one before it in a micro-batch
// (llama.PGSeq.Shared), a group's prompt.
func sharedPrefix(a, b []llama.Token, most int) int {
	n := 0
	for n < most && n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Gradient evaluates the loss and its gradient over all examples (summed over
// micro-batches) without changing the parameters. The gradient is in
// Grads() until the next call.
func (t *Trainer) Gradient(ctx context.Context, exs []Example) (StepStats, error) {
	if len(exs) == 0 {
		return StepStats{}, errors.New("no training examples")
	}
	z, err := t.norms(exs)
	if err != nil {
		return StepStats{}, err
	}
	return t.gradient(ctx, exs, z)
}

// gradient is Gradient with the aggregation's factors z. It needs the
// current log-probabilities before the backward pass only when the weights
// depend on them: an importance ratio against given old log-probs, or the
// KL term; then a gradient-free forward comes first.
func (t *Trainer) gradient(ctx context.Context, exs []Example, z []float64) (StepStats, error) {
	// Every pass from one OS thread: ggml's OpenMP team belongs to the
	// thread that starts a graph, and a second team's spinning workers
	// would take cores from the first (rollout's pinThread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	obj := Objective{EpsLow: t.cfg.Epsilon, EpsHigh: t.cfg.EpsilonHigh, Beta: t.cfg.Beta}
	adv := make([]float64, len(exs))
	var old, ref [][]float32
	for i, e := range exs {
		adv[i] = e.Advantage
		if e.OldLogProbs != nil {
			if old == nil {
				old = make([][]float32, len(exs))
			}
			old[i] = e.OldLogProbs
		}
	}
	st := StepStats{Sequences: len(exs)}
	if obj.Beta > 0 {
		if err := t.fillReference(exs); err != nil {
			return st, err
		}
		st.Forwards++
		ref = make([][]float32, len(exs))
		for i, e := range exs {
			ref[i] = e.RefLogProbs
		}
	}
	var w []float64
	var tokenW [][]float32
	mk := masks(exs)
	skip := t.zeroWeight(exs, z)
	if old != nil || obj.Beta > 0 {
		cur, err := t.logProbs(exs, skip)
		if err != nil {
			return st, err
		}
		st.Forwards++
		bl, err := obj.Loss(adv, cur, old, ref, z, mk)
		if err != nil {
			return st, err
		}
		tokenW = bl.Weights
		st.Objective, st.ClipFrac, st.KL = bl.Loss, bl.ClipFrac, bl.MeanKL
	} else if mk != nil {
		// a weight per token: w_i where the mask keeps the token, else 0
		tokenW = make([][]float32, len(exs))
		for i, e := range exs {
			tokenW[i] = make([]float32, len(e.Completion))
			for k := range tokenW[i] {
				if mk[i] == nil || mk[i][k] {
					tokenW[i][k] = float32(adv[i] * z[i])
				}
			}
		}
	} else {
		w = make([]float64, len(exs))
		for i := range exs {
			w[i] = adv[i] * z[i]
		}
	}
	entW := t.entropyWeights(exs, z, mk)
	mbs, err := t.microBatches(exs, w, tokenW, entW, skip)
	if err != nil {
		return st, err
	}
	for _, g := range t.grads {
		clear(g)
	}
	st.MicroBatches = len(mbs)
	var evaluated [][]float32 // the evaluated examples' log-probs, in order
	for _, mb := range mbs {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		for _, s := range mb {
			st.SharedTokens += s.Shared
		}
		loss, lp, err := t.ctx.PGEval(mb, t.params, t.mgrad)
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
			k := len(s.Tokens) - s.NPrompt
			evaluated = append(evaluated, lp[:k])
			lp = lp[k:]
			st.Tokens += k
			st.AllTokens += len(s.Tokens)
		}
	}
	st.LogProbs = make([][]float32, len(exs))
	for i := range exs {
		if skip != nil && skip[i] {
			st.ZeroWeight++
			continue
		}
		st.LogProbs[i], evaluated = evaluated[0], evaluated[1:]
	}
	if old == nil && obj.Beta == 0 {
		// Weights did not need the log-probs: the objective (ratio 1, no
		// KL) comes from the training evaluation's own forward; a skipped
		// example's terms are zero at any log-probs.
		bl, err := obj.Loss(adv, filled(exs, st.LogProbs), nil, nil, z, mk)
		if err != nil {
			return st, err
		}
		st.Objective = bl.Loss
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

// fillReference computes the reference log-probs (the base model: the
// adapter removed for one gradient-free forward) of the examples that lack
// them.
func (t *Trainer) fillReference(exs []Example) error {
	var need []int
	for i, e := range exs {
		if e.RefLogProbs == nil {
			need = append(need, i)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if t.adapter == nil {
		return errors.New("train.beta > 0 needs a LoRA adapter: the reference is the model without it")
	}
	sub := make([]Example, len(need))
	longest := 0
	for k, i := range need {
		sub[k] = exs[i]
		longest = max(longest, len(exs[i].Prompt)+len(exs[i].Completion))
	}
	// a context grown while the adapter is off would get it back
	if err := t.grow(longest); err != nil {
		return err
	}
	t.ctx.ClearAdapters()
	lp, err := t.LogProbs(sub)
	if serr := t.ctx.SetAdapter(t.adapter, 1); err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("reference log-probs: %w", err)
	}
	for k, i := range need {
		exs[i].RefLogProbs = lp[k]
	}
	return nil
}

// entropyWeights are the per-token weights of the entropy term: the
// sequence's factor z_i times EntropyCoef on every token the mask keeps
// (verl's agg_loss of the entropy with the policy loss's aggregation); nil
// without the term.
func (t *Trainer) entropyWeights(exs []Example, z []float64, mk [][]bool) [][]float32 {
	if t.cfg.EntropyCoef == 0 {
		return nil
	}
	out := make([][]float32, len(exs))
	for i, e := range exs {
		out[i] = make([]float32, len(e.Completion))
		for k := range out[i] {
			if mk == nil || mk[i] == nil || mk[i][k] {
				out[i][k] = float32(t.cfg.EntropyCoef * z[i])
			}
		}
	}
	return out
}

// Grads is the gradient of the last Gradient or Step call, one slice per param.
func (t *Trainer) Grads() [][]float32 { return t.grads }

// zeroWeight marks the examples whose loss is zero at every parameter, so
// that no pass needs them: without a KL term (Beta 0), an example with a
// zero advantage, a zero norm (masked) or every token masked. Its clipped
// ratio term is min(r·0, clip(r)·0) = 0 whatever the ratio r, and never
// counts as clipped. nil when none is, or when Beta > 0 (the KL term pulls
// every sequence). With an entropy term only the masked examples are left
// out: the entropy pulls every other sequence.
func (t *Trainer) zeroWeight(exs []Example, z []float64) []bool {
	if t.cfg.Beta != 0 || t.cfg.keepZeroWeight {
		return nil
	}
	var skip []bool
	for i, e := range exs {
		noPG := e.Advantage == 0 && t.cfg.EntropyCoef == 0
		if noPG || z[i] == 0 || e.Mask != nil && e.kept() == 0 {
			if skip == nil {
				skip = make([]bool, len(exs))
			}
			skip[i] = true
		}
	}
	return skip
}

// zeroSignal reports whether no example carries an advantage (all zero or
// masked): such a batch has nothing to teach. With an entropy term
// (entropy), any unmasked example has its entropy's gradient.
func zeroSignal(exs []Example, entropy bool) bool {
	for _, e := range exs {
		allMasked := e.Masked || e.Mask != nil && e.kept() == 0
		if !allMasked && (e.Advantage != 0 || entropy) {
			return false
		}
	}
	return true
}

// Step runs one optimiser step on the examples: the gradient of METHOD.md's
// loss accumulated over micro-batches, clipped to GradClip by global norm,
// then AdamW (decoupled weight decay) on the parameters at the scheduled
// learning rate. A batch whose advantages are all zero (or whose
// completions are all masked) is skipped: no evaluation, and neither the
// parameters nor the AdamW moments move (momentum alone would otherwise
// keep pushing the adapter with no signal), nor the schedule's count.
// With Beta > 0 it fills in the examples' RefLogProbs.
func (t *Trainer) Step(ctx context.Context, exs []Example) (StepStats, error) {
	start := time.Now()
	if len(exs) == 0 {
		return StepStats{}, errors.New("no training examples")
	}
	z, err := t.norms(exs)
	if err != nil {
		return StepStats{}, err
	}
	if zeroSignal(exs, t.cfg.EntropyCoef != 0) {
		return StepStats{Sequences: len(exs), Skipped: true}, nil
	}
	st, err := t.gradient(ctx, exs, z)
	if err != nil {
		return st, err
	}
	scale := 1.0
	if t.cfg.GradClip > 0 && st.GradNorm > t.cfg.GradClip {
		scale = t.cfg.GradClip / st.GradNorm
		st.Clipped = true
	}
	t.step++
	lr, err := ScheduledLR(t.cfg.Schedule, t.cfg.LR, int(t.step), t.cfg.WarmupSteps, t.cfg.TotalSteps)
	if err != nil {
		return st, err
	}
	st.LR = lr
	b1, b2 := t.cfg.Beta1, t.cfg.Beta2
	c1 := 1 - math.Pow(b1, float64(t.step))
	c2 := 1 - math.Pow(b2, float64(t.step))
	eps, wd := t.cfg.Eps, t.cfg.WeightDecay
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
		if err := p.Set(val); err != nil {
			return st, err
		}
	}
	st.Seconds = time.Since(start).Seconds()
	return st, nil
}

// Update makes Iterations updates on one batch of fresh rollouts (mu of
// METHOD.md). The first is on-policy: the rollouts were sampled with the
// current parameters, so its ratio is 1 and its own forward gives the old
// log-probs that the later updates' ratios are taken against (examples
// that bring OldLogProbs keep theirs). It returns each update's stats; a
// batch without signal is skipped once.
func (t *Trainer) Update(ctx context.Context, exs []Example) ([]StepStats, error) {
	exs = slices.Clone(exs)
	var out []StepStats
	for k := 0; k < t.cfg.Iterations; k++ {
		st, err := t.Step(ctx, exs)
		if err != nil {
			return out, fmt.Errorf("update %d of %d: %w", k+1, t.cfg.Iterations, err)
		}
		out = append(out, st)
		if st.Skipped {
			break
		}
		if k == 0 {
			for i := range exs {
				if exs[i].OldLogProbs == nil {
					exs[i].OldLogProbs = st.LogProbs[i]
				}
			}
		}
	}
	return out, nil
}

// LogProbs evaluates, without gradients, the log-probability of every
// completion token of each example under the current parameters.
func (t *Trainer) LogProbs(exs []Example) ([][]float32, error) { return t.logProbs(exs, nil) }

// logProbs is LogProbs leaving out the examples with skip[i]: theirs come
// back as zeros (a zero-weight example's terms do not depend on them).
func (t *Trainer) logProbs(exs []Example, skip []bool) ([][]float32, error) {
	mbs, err := t.microBatches(exs, make([]float64, len(exs)), nil, nil, skip)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(exs))
	i := 0
	for _, mb := range mbs {
		_, lp, err := t.ctx.PGEval(mb, nil, nil)
		if err != nil {
			return nil, err
		}
		for _, s := range mb {
			for skip != nil && skip[i] {
				i++
			}
			n := len(s.Tokens) - s.NPrompt
			out[i] = lp[:n]
			lp = lp[n:]
			i++
		}
	}
	return filled(exs, out), nil
}

// filled is lp with zeros for the examples it has none for.
func filled(exs []Example, lp [][]float32) [][]float32 {
	out := slices.Clone(lp)
	for i, e := range exs {
		if out[i] == nil {
			out[i] = make([]float32, len(e.Completion))
		}
	}
	return out
}

// optimizerMagic starts a saved optimiser state.
const optimizerMagic = "confclip-adamw-v1"

// MarshalBinary saves the AdamW state (step count and moments) for a
// checkpoint; the parameter values are saved with the adapter.
func (t *Trainer) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(optimizerMagic)
	var err error
	put := func(v any) { // the first error is kept (a bad type; a Buffer never fails to grow)
		if err == nil {
			err = binary.Write(&b, binary.LittleEndian, v)
		}
	}
	put(t.step)
	put(int64(len(t.params)))
	for j, p := range t.params {
		put(int64(len(p.Name)))
		b.WriteString(p.Name)
		put(int64(p.Len()))
		put(t.m[j])
		put(t.v[j])
	}
	if err != nil {
		return nil, fmt.Errorf("optimizer state: %w", err)
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
		if _, err := io.ReadFull(r, name); err != nil {
			return errors.New("optimizer state: corrupt")
		}
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
func (t *Trainer) SyncFromModel() error {
	for j, p := range t.params {
		if err := p.Get(t.values[j]); err != nil {
			return err
		}
	}
	return nil
}

// F32Weights lists the model's trainable F32 weights for full-parameter
// training (every weight matrix, norm and bias).
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
		if strings.HasPrefix(ti.Name, "rope_freqs.") {
			continue // gemma4's RoPE frequency factors: a fixed table, and ggml has no gradient for it
		}
		if strings.HasSuffix(ti.Name, ".weight") || strings.HasSuffix(ti.Name, ".bias") { // biases: qwen2's Q, K, V
			names = append(names, ti.Name)
		}
	}
	return names, nil
}
