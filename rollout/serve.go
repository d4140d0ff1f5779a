package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confclip/confclip/dataset"
)

// Serve is Generate for prompts that keep arriving (confclip serve): before
// each decode step it asks next for the prompts handed in since, without
// waiting, and admits them into the running batch as slots free up; when
// nothing is left to decode it asks again, waiting, and returns when next
// gives nil then. Each group goes to emit when done, as in Generate; a
// prompt the engine cannot take (too long for a sequence's context, no
// tokens) goes to reject with the reason, and the others go on.
//
// The engine must have a fixed context (Options.NCtx): a sequence may use
// NCtx/Parallel tokens, prompt and completion.
func (e *Engine) Serve(ctx context.Context, next func(wait bool) []dataset.Prompt, emit func([]dataset.Rollout) error,
	reject func(p *dataset.Prompt, reason string)) (Stats, error) {
	start := time.Now()
	var st Stats
	if e.o.NCtx == 0 || e.ctx == nil {
		return st, errors.New("rollout: Serve needs an engine with a fixed context (Options.NCtx)")
	}
	limit := e.o.NCtx / e.o.Parallel
	feed := func(wait bool) []*group {
		for {
			ps := next(wait)
			if ps == nil {
				return nil
			}
			var local Stats
			gs := e.prepare(ps, &local)
			for _, re := range local.Errors {
				reject(&ps[re.Index], re.Reason)
			}
			kept := gs[:0]
			for _, g := range gs {
				if n := len(g.toks) + e.o.MaxTokens; n > limit {
					reject(g.p, fmt.Sprintf("prompt of %d tokens + %d max tokens does not fit the %d-token context of one sequence", len(g.toks), e.o.MaxTokens, limit))
					continue
				}
				kept = append(kept, g)
			}
			if len(kept) > 0 || !wait {
				return kept
			}
		}
	}
	err := e.generate(ctx, nil, &st, emit, feed)
	st.Elapsed = time.Since(start)
	return st, err
}

// SeqLimit is the most tokens, prompt and completion, one sequence may use:
// NCtx/Parallel with a fixed context, else the per-sequence bound.
func (e *Engine) SeqLimit() int {
	if e.o.NCtx > 0 {
		return e.o.NCtx / e.o.Parallel
	}
	return e.o.SeqCtx
}
