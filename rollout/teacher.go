package rollout

import (
	"context"
	"fmt"
	"slices"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/sampler"
)

// forced is one record being teacher-forced.
type forced struct {
	r      *dataset.Rollout
	toks   []llama.Token // prompt then completion
	np     int           // prompt tokens
	fed    int           // tokens decoded so far
	slot   int
	lp, en []float64
	sc     []float64
}

// TeacherForce computes the model log-probability, entropy and
// self-certainty of every completion token of the records, as the engine
// would have recorded them while sampling those tokens: it fills
// PromptTokens, Tokens, Logprobs, Entropies, SelfCertainties and TokenOffsets (and Text, when a record has tokens and no
// text).
//
// A record's prompt tokens are PromptTokens, or else Prompt tokenized with
// BOS as the model asks and special-token text parsed (a rendered chat
// prompt). Its completion is Tokens, or else Text tokenized after the prompt:
// prompt and text are tokenized together and the tokens past the prompt's
// taken, so that the first completion token is the one a model would have
// produced after that prompt (falling back to the text on its own when the
// joint tokenization does not start with the prompt's tokens).
//
// Records are packed several to a decode, each its own sequence, up to the
// batch size; logits are computed only at positions whose next token is a
// completion token, and log-probs come from the rows' sums computed as
// sampling computes them (llama.Context.LogitRows, then
// sampler.LogSoftmaxScanned), so rollout and teacher-forced log-probs of
// the same tokens agree bit for bit on the same logits. A record that cannot be scored stops the call with
// a RecordError.
func (e *Engine) TeacherForce(ctx context.Context, recs []*dataset.Rollout) error {
	items := make([]*forced, 0, len(recs))
	longest := 0
	for i, r := range recs {
		f, err := e.forcedRecord(r)
		if err != nil {
			return RecordError{Index: i, ID: r.PromptID, Reason: err.Error()}
		}
		if e.o.NCtx > 0 && len(f.toks) > e.o.NCtx {
			return RecordError{Index: i, ID: r.PromptID, Reason: fmt.Sprintf("%d prompt and completion tokens do not fit the %d-token context", len(f.toks), e.o.NCtx)}
		}
		longest = max(longest, len(f.toks))
		items = append(items, f)
	}
	if longest == 0 {
		return nil
	}
	if e.ctx == nil || e.ctx.NCtx() < longest {
		if err := e.ensureContext(max((longest+63)/64*64, e.o.NBatch)); err != nil {
			return err
		}
	}
	if err := e.force(ctx, items); err != nil {
		return err
	}
	for i, f := range items {
		r := f.r
		text, offsets, err := piecesText(e.pieces, f.toks[f.np:])
		if err != nil {
			return RecordError{Index: i, ID: r.PromptID, Reason: err.Error()}
		}
		if r.Text == "" {
			r.Text = text
		}
		for j := range offsets {
			offsets[j] = min(offsets[j], len(r.Text)) // a text cut at a stop string
		}
		r.PromptTokens = f.toks[:f.np:f.np]
		r.Tokens = f.toks[f.np:]
		r.Logprobs, r.Entropies, r.SelfCertainties, r.TokenOffsets = f.lp, f.en, f.sc, offsets
	}
	return nil
}

// forcedRecord works out a record's prompt and completion tokens.
func (e *Engine) forcedRecord(r *dataset.Rollout) (*forced, error) {
	prompt := r.PromptTokens
	if len(prompt) == 0 {
		var err error
		if prompt, err = e.m.Tokenize(r.Prompt, true, true); err != nil {
			return nil, fmt.Errorf("tokenizing the prompt: %w", err)
		}
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("no prompt tokens: the first completion token would have no context")
	}
	comp := r.Tokens
	if len(comp) == 0 && r.Text != "" {
		joint, err := e.m.Tokenize(r.Prompt+r.Text, true, true)
		if err != nil {
			return nil, fmt.Errorf("tokenizing the completion: %w", err)
		}
		if len(joint) > len(prompt) && slices.Equal(joint[:len(prompt)], prompt) {
			comp = joint[len(prompt):]
		} else if comp, err = e.m.Tokenize(r.Text, false, false); err != nil {
			return nil, fmt.Errorf("tokenizing the completion: %w", err)
		}
	}
	nv := int32(e.m.NVocab())
	toks := make([]llama.Token, 0, len(prompt)+len(comp))
	toks = append(append(toks, prompt...), comp...)
	for i, t := range toks {
		if t < 0 || t >= nv {
			return nil, fmt.Errorf("token %d (index %d) outside the vocabulary of %d", t, i, nv)
		}
	}
	return &forced{r: r, toks: toks, np: len(prompt), lp: make([]float64, len(comp)), en: make([]float64, len(comp)), sc: make([]float64, len(comp))}, nil
}

// forcedOut is a batch row whose logits score a forced token.
type forcedOut struct {
	f   *forced
	i   int // batch index
	pos int // position whose next token is scored
}

// scoreForced reads the decoded rows of outs: each forced token's
// log-prob, the row's entropy and self-certainty. The rows' sums are
// computed on the decode's threads (as sampleAll's); idx is scratch space,
// returned for reuse.
func scoreForced(c *llama.Context, outs []forcedOut, idx []int32) ([]int32, error) {
	idx = idx[:0]
	for _, o := range outs {
		idx = append(idx, int32(o.i))
	}
	rows, err := c.LogitRows(idx, nil)
	if err != nil {
		return idx, err
	}
	for j, o := range outs {
		logits, err := c.Logits(o.i)
		if err != nil {
			return idx, err
		}
		k := o.pos + 1 - o.f.np
		var ch sampler.Choice
		st, err := rowStats(logits, rows[j])
		if err == nil {
			ch, err = sampler.ForcedChoice(logits, o.f.toks[o.pos+1], st)
		}
		if err != nil {
			return idx, fmt.Errorf("prompt %q sample %d, token %d: %w", o.f.r.PromptID, o.f.r.Sample, k+1, err)
		}
		o.f.lp[k], o.f.en[k], o.f.sc[k] = ch.LogProb, ch.Entropy, ch.SelfCertainty
	}
	return idx, nil
}

// force runs the records through the model, packing as many sequences into
// each decode as the batch, the sequence slots and the KV cache allow.
func (e *Engine) force(ctx context.Context, queue []*forced) error {
	defer pinThread()()
	c, b := e.ctx, e.batch
	c.ClearKV()
	free := make([]int, 0, e.o.Parallel)
	for s := e.o.Parallel - 1; s >= 0; s-- {
		free = append(free, s)
	}
	var inflight []*forced
	var outs []forcedOut
	var idx []int32
	used := 0 // KV cells held by the records in flight
	for len(queue) > 0 || len(inflight) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		for len(queue) > 0 && len(free) > 0 && used+len(queue[0].toks) <= c.NCtx() {
			f := queue[0]
			queue = queue[1:]
			if len(f.toks) == f.np {
				continue // no completion: nothing to score
			}
			f.slot = free[len(free)-1]
			free = free[:len(free)-1]
			used += len(f.toks)
			inflight = append(inflight, f)
		}
		b.Clear()
		outs = outs[:0]
		for _, f := range inflight {
			for f.fed < len(f.toks)-1 && b.Len() < b.Cap() {
				// The last token is never decoded: nothing follows it.
				scored := f.fed >= f.np-1
				i, err := b.Add(f.toks[f.fed], f.fed, []int{f.slot}, scored)
				if err != nil {
					return err
				}
				if scored {
					outs = append(outs, forcedOut{f, i, f.fed})
				}
				f.fed++
			}
		}
		if b.Len() == 0 {
			continue
		}
		if err := c.Decode(b); err != nil {
			return err
		}
		var err error
		if idx, err = scoreForced(c, outs, idx); err != nil {
			return err
		}
		kept := inflight[:0]
		for _, f := range inflight {
			if f.fed < len(f.toks)-1 {
				kept = append(kept, f)
				continue
			}
			c.SeqRemove(f.slot, -1, -1)
			free = append(free, f.slot)
			used -= len(f.toks)
		}
		inflight = kept
	}
	return nil
}
