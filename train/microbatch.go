package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/confclip/confclip/llama"
)

// A training pass keeps every layer's activations for the backward pass, so
// its compute buffer grows with the tokens packed into it: about 0.62 MiB a
// token on the 100M-parameter benchmark model (768 wide, 8 layers, 32,000
// tokens of vocabulary), against 380 MiB of weights. The default micro-batch
// is therefore sized from the model: the most tokens whose estimated
// activations stay within ActivationShare of the weights (at least
// MinActivationBudget, so that small models still pack many sequences), and
// at most MaxAutoMicroBatch. A sequence longer than the micro-batch is never
// refused: it runs alone, in a context grown to hold it.
const (
	ActivationShare     = 0.15
	MinActivationBudget = 48 << 20
	MaxAutoMicroBatch   = 512
)

// Shape is what the activation estimate needs of a model.
type Shape struct {
	Embd, FF, Layers, Heads, Vocab int
	SoftCap                        bool // attention scores soft-capped (gemma2)
}

// ModelShape reads a model's shape: its width, feed-forward width (the
// largest layer's, or 4x the width when the file does not say), layers,
// heads and vocabulary.
func ModelShape(m *llama.Model) Shape {
	info := m.Info()
	s := Shape{Embd: info.Embd, Layers: info.Layers, Heads: info.Heads, Vocab: m.NVocab(),
		SoftCap: m.Meta(info.Architecture+".attn_logit_softcapping") != ""}
	// one number, or an array of one per layer: "[2048, 2048, ...]"
	for _, f := range strings.FieldsFunc(m.Meta(info.Architecture+".feed_forward_length"), func(r rune) bool {
		return r == '[' || r == ']' || r == ',' || r == ' '
	}) {
		if n, err := strconv.Atoi(f); err == nil {
			s.FF = max(s.FF, n)
		}
	}
	if s.FF == 0 {
		s.FF = 4 * s.Embd
	}
	return s
}

// ActivationBytes estimates, from above, the compute buffer of a LoRA or
// full training pass over `tokens` packed tokens of which `rows` are
// completion tokens. The terms, in float32: per layer and token 8 vectors
// of the width (norms, Q/K/V, the attention's output, residuals) and 3.2 of
// the feed-forward width (gate, up, their product); per layer two
// heads x tokens x tokens score matrices (the packed attention's softmax
// and a gradient; three with soft-capped scores) and the masks; per completion row three vocabulary-wide
// rows (logits, labels, their gradient); 256 KiB for the rest.
// TestActivationEstimate holds it above the measured buffer, and within 2x
// of it, on every generated architecture and stories260K.
func ActivationBytes(s Shape, tokens, rows int) int64 {
	t, r := int64(tokens), int64(rows)
	scores := int64(2)
	if s.SoftCap {
		scores = 3
	}
	perLayer := 4*t*(8*int64(s.Embd)+int64(16*s.FF)/5) + 4*scores*int64(s.Heads)*t*t
	return int64(s.Layers)*perLayer + 12*r*int64(s.Vocab) + 8*t*t + 256<<10
}

// ActivationBudget is the compute buffer the default micro-batch aims at:
// ActivationShare of the model's weights, at least MinActivationBudget.
func ActivationBudget(m *llama.Model) int64 {
	return max(int64(ActivationShare*float64(m.Info().SizeBytes)), MinActivationBudget)
}

// AutoMicroBatch is the default micro-batch of a model: the most tokens (at
// most MaxAutoMicroBatch, at least 1) whose ActivationBytes, every token a
// completion row, fit ActivationBudget.
func AutoMicroBatch(m *llama.Model) int {
	s, budget := ModelShape(m), ActivationBudget(m)
	lo, hi := 1, MaxAutoMicroBatch // the answer is in [lo, hi]
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ActivationBytes(s, mid, mid) <= budget {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// contextTokens is the training context's capacity for a micro-batch of n
// tokens: rounded up to 64, so that a run of slightly longer sequences does
// not make a new context each time.
func contextTokens(n int) int { return (max(n, 1) + 63) / 64 * 64 }

// grow gives the trainer a context that holds n tokens in one pass (a
// sequence longer than the micro-batch runs alone): a new context, with the
// adapter set on it and the profile's totals carried over.
func (t *Trainer) grow(n int) error {
	if n <= t.capacity {
		return nil
	}
	c := contextTokens(n)
	nctx, err := t.newContext(c)
	if err != nil {
		return fmt.Errorf("a context for a sequence of %d tokens: %w", n, err)
	}
	if t.adapter != nil {
		if err := nctx.SetAdapter(t.adapter, 1); err != nil {
			nctx.Close()
			return err
		}
	}
	t.profPrev = mergeProfiles(t.profPrev, t.ctx.Profile())
	t.ctx.Close()
	t.ctx, t.capacity = nctx, c
	return nil
}

// newContext is a training context for micro-batches of up to n tokens.
func (t *Trainer) newContext(n int) (*llama.Context, error) {
	nctx := (n + 255) / 256 * 256 // llama.cpp pads n_ctx to 256
	return llama.NewContext(t.model, llama.ContextParams{NCtx: nctx, NBatch: n, NUBatch: n, NSeqMax: 1,
		Threads: t.cfg.Threads, FlashAttn: llama.FlashAttnOff, TrainingGraphs: true, Profile: t.cfg.Profile})
}

// ComputeBufferBytes is the training context's compute buffer: the
// activations and gradients of the largest pass so far.
func (t *Trainer) ComputeBufferBytes() int64 { return t.ctx.ComputeBufferBytes() }
