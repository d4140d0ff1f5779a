package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/sampler"
)

// Request is a prompt for Serve, with its own settings when Options is set:
// its Group, MaxTokens, Sampling, Seed, Stop and TopLogprobs replace the engine's for
// this prompt (the other options shape the context and stay the engine's).
// A prompt's samples depend on its settings, its id and the model only, not
// on the requests beside it (up to the rounding the package comment
// describes).
type Request struct {
	Prompt  dataset.Prompt
	Options *Options
	// Done, when set, is closed when the request is given up (its client
	// left): the group's sequences are freed before the next decode step,
	// whatever they have generated, and the prompt goes to reject.
	Done <-chan struct{}
}

// Serve is Generate for prompts that keep arriving (confclip serve): before
// each decode step it asks next for the requests handed in since, without
// waiting, and admits them into the running batch as slots free up, whatever
// their settings; when nothing is left to decode it asks again, waiting, and
// returns when next gives nil then. Each group goes to emit when done, as in
// Generate; a prompt the engine cannot take (too long for a sequence's
// context, no tokens, bad settings) goes to reject with the reason, and the
// others go on.
//
// progress, when set, is called after each token a sequence keeps (not its
// last) with the completion's bytes so far, each token's offset in them and
// the log-probs (and the alternatives, with Options.TopLogprobs); the
// slices are the engine's, valid during the call only.
// A stop string may still cut the last bytes (as many as the longest stop
// string less one); the text is not yet made valid UTF-8 (finish does).
//
// A request whose Done is closed goes to reject with the reason "request
// cancelled" and takes no more slots or decode steps.
//
// The engine must have a fixed context (Options.NCtx): a sequence may use
// NCtx/Parallel tokens, prompt and completion.
func (e *Engine) Serve(ctx context.Context, next func(wait bool) []Request, emit func([]dataset.Rollout) error,
	reject func(p *dataset.Prompt, reason string),
	progress func(p *dataset.Prompt, sample int, raw []byte, offsets []int, logprobs []float64, top [][]dataset.TopLogprob)) (Stats, error) {
	e.progress = progress
	e.cancelled = func(p *dataset.Prompt) { reject(p, "request cancelled") }
	defer func() { e.progress, e.cancelled = nil, nil }()
	start := time.Now()
	var st Stats
	if e.o.NCtx == 0 || e.ctx == nil {
		return st, errors.New("rollout: Serve needs an engine with a fixed context (Options.NCtx)")
	}
	limit := e.o.NCtx / e.o.Parallel
	feed := func(wait bool) []*group {
		for {
			reqs := next(wait)
			if reqs == nil {
				return nil
			}
			ps := make([]dataset.Prompt, len(reqs))
			for i := range reqs {
				ps[i] = reqs[i].Prompt
			}
			var local Stats
			gs := e.prepare(ps, &local)
			for _, re := range local.Errors {
				reject(&ps[re.Index], re.Reason)
			}
			kept := gs[:0]
			for _, g := range gs {
				g.gone = reqs[g.index].Done
				if o := reqs[g.index].Options; o != nil {
					if err := e.setGroupOptions(g, *o); err != nil {
						reject(g.p, err.Error())
						continue
					}
				}
				if reason := g.fit(limit); reason != "" {
					reject(g.p, reason)
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

// setGroupOptions gives a group a request's own settings.
func (e *Engine) setGroupOptions(g *group, o Options) error {
	if o.TopLogprobs < 0 || o.TopLogprobs > sampler.MaxTop {
		return fmt.Errorf("top log-probs %d: want 0..%d", o.TopLogprobs, sampler.MaxTop)
	}
	if err := o.check(); err != nil {
		return err
	}
	var stops [][]byte
	for _, s := range o.Stop {
		stops = append(stops, []byte(s))
	}
	smp, err := e.samplerFor(o.Params)
	if err != nil {
		return err
	}
	g.n, g.maxTokens, g.seed, g.stops, g.smp, g.top = o.Group, o.MaxTokens, o.Seed, stops, smp, o.TopLogprobs
	g.recs = make([]dataset.Rollout, o.Group)
	return nil
}

// samplerFor returns the sampler for p, made once (a bounded number of
// settings is kept).
func (e *Engine) samplerFor(p sampler.Params) (*sampler.Sampler, error) {
	if p == e.o.Params {
		return e.smp, nil
	}
	if s, ok := e.smpBy[p]; ok {
		return s, nil
	}
	if e.smpBy == nil || len(e.smpBy) >= maxSamplerSets {
		e.smpBy = map[sampler.Params]*sampler.Sampler{} // groups keep theirs
	}
	s, err := sampler.New(p)
	if err != nil {
		return nil, err
	}
	e.smpBy[p] = s
	return s, nil
}

// maxSamplerSets bounds the sampling settings whose samplers (and their
// vocabulary-sized scratch buffers) Serve keeps between requests.
const maxSamplerSets = 16

// SeqLimit is the most tokens, prompt and completion, one sequence may use:
// NCtx/Parallel with a fixed context, else the per-sequence bound.
func (e *Engine) SeqLimit() int {
	if e.o.NCtx > 0 {
		return e.o.NCtx / e.o.Parallel
	}
	return e.o.SeqCtx
}
