// Package rollout is the generation engine: G completions per prompt, the
// prompt decoded once and shared by the group's sequences, continuous
// batching across prompts, stop rules, and every token's model and sampling
// log-probabilities; and teacher-forced scoring of given completions, which
// computes those log-probabilities with the same code.
//
// One decode step is one llama_decode of a batch that holds one token for
// every sequence still generating plus, when a group has just been admitted,
// its prompt's tokens (tagged with all of the group's sequence ids, so the
// prompt's KV cells are computed once and shared). A prompt longer than the
// batch is spread over several steps. When a sequence ends its KV cells are
// freed; when enough sequences have ended, the next waiting group is admitted,
// so the batch stays full.
//
// Reproducibility: each sequence draws from its own RNG, keyed by (seed,
// prompt id, sample index) (sampler.NewRNG), so what is sampled does not
// depend on which other sequences share its batch or on the thread count,
// except through the floating-point rounding of the logits, which llama.cpp
// may compute in a different order for a different batch.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/sampler"
)

// Options configure an Engine. The fields with a toml tag are the
// [rollout] table of the configuration: their defaults are DefaultOptions,
// their checks Checks (which NewEngine runs too); the others come from
// other tables or from Go callers.
type Options struct {
	Group int `toml:"group"` // completions per prompt (G); 0 = DefaultGroup
	// MaxTokens is the completion length limit; 0 is the context that is
	// left after the prompt (one sequence's context less the prompt's
	// tokens), as in llama-server and vLLM.
	MaxTokens      int      `toml:"max_tokens"`
	sampler.Params          // temperature (0 = greedy), top_p, top_k, min_p
	Seed           uint64   `toml:"seed"`     // base seed of every sequence's RNG
	Parallel       int      `toml:"parallel"` // sequences in flight; 0 = max(G, 16)
	Chat           bool     `toml:"chat"`     // render every prompt with the chat template
	Stop           []string `toml:"stop"`     // stop strings
	// Endpoints, when set, are the rollout workers of pipeline's run
	// ("http://host:port/v1"): OpenAI-compatible servers, confclip serve
	// for adapter uploads (docs/scale.md). The engine does not read them.
	Endpoints []string `toml:"endpoints"`
	// ChatTemplate is a template's text or a built-in name ("chatml", ...);
	// "" = the model's own.
	ChatTemplate string `toml:"-"`
	// NCtx is the KV cache size in tokens over all sequences. 0 sizes it to
	// the prompts of each call: Parallel × (longest prompt + MaxTokens).
	// Given, each sequence may use NCtx/Parallel tokens.
	NCtx int `toml:"-"`
	// SeqCtx bounds prompt + MaxTokens for one sequence when NCtx is 0;
	// 0 = the model's training context.
	SeqCtx  int `toml:"-"`
	NBatch  int `toml:"-"` // most tokens one decode takes; 0 = max(512, Parallel)
	Threads int `toml:"-"` // 0 = DefaultThreads(model): by the model's size, at most the cores
	// KVType is the KV cache's type: "f32" (default) or "f16", "q8_0", ...
	// (llama.ParseKVType's names). A rounded cache makes the log-probs
	// depend on how tokens were batched: f16 costs about 1e-3 of agreement
	// with teacher forcing.
	KVType string `toml:"-"`
	// FlashAttn is "on", "off" or "auto"; the default is "on" for a model
	// on the CPU alone (llama.Model.CPUOnly) and "off" otherwise. On the CPU
	// an F32 cache stays F32 under flash attention (the project's patch
	// 0032): the kernel skips the cells of other sequences, which a unified
	// cache otherwise multiplies and masks, and rollout and teacher-forced
	// log-probs still agree to about 1e-6. On a GPU, llama.cpp rounds K and
	// V to f16 for it (log-probs then move by about 3e-3 with batch
	// composition), so it stays off there unless asked for.
	FlashAttn string `toml:"-"`
	// kv and fa are KVType and FlashAttn parsed, once, by NewEngine.
	kv llama.KVType
	fa llama.FlashAttn
	// NoTiming leaves the timing out of the records, whose bytes then depend
	// only on the options, the prompts and the model.
	NoTiming bool `toml:"-"`
	// TopLogprobs, when > 0, records the most likely tokens (at most
	// sampler.MaxTop) at each sampled position in Rollout.TopLogprobs, from
	// the row the token was drawn from. 0 (default) records none and costs
	// nothing.
	TopLogprobs int `toml:"-"`
}

// KVCacheType is KVType parsed; set by NewEngine (Engine.Options), the
// default (llama.KVDefault) before.
func (o Options) KVCacheType() llama.KVType { return o.kv }

// FlashAttnMode is FlashAttn parsed; set by NewEngine (Engine.Options),
// llama.FlashAttnAuto before.
func (o Options) FlashAttnMode() llama.FlashAttn { return o.fa }

func (o *Options) defaults() error {
	if err := o.check(); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if o.Parallel == 0 {
		o.Parallel = max(o.Group, 16)
	}
	if o.KVType == "" {
		o.KVType = "f32"
	}
	if o.FlashAttn == "" {
		o.FlashAttn = "off"
	}
	var err error
	if o.kv, err = llama.ParseKVType(o.KVType); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if o.fa, err = llama.ParseFlashAttn(o.FlashAttn); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	if o.NBatch == 0 {
		o.NBatch = max(512, o.Parallel)
	}
	switch {
	case o.NBatch < o.Parallel:
		return fmt.Errorf("rollout: batch of %d tokens cannot hold one token for each of %d parallel sequences", o.NBatch, o.Parallel)
	case o.NCtx < 0 || o.SeqCtx < 0:
		return fmt.Errorf("rollout: negative context size")
	case o.NCtx > 0 && o.NCtx < o.Parallel:
		return fmt.Errorf("rollout: context of %d tokens for %d parallel sequences", o.NCtx, o.Parallel)
	case o.TopLogprobs < 0 || o.TopLogprobs > sampler.MaxTop:
		return fmt.Errorf("rollout: top log-probs %d: want 0..%d", o.TopLogprobs, sampler.MaxTop)
	}
	return nil
}

// Engine generates completions and scores given ones with one model. It owns
// a llama.Context and is used by one goroutine at a time.
type Engine struct {
	m      *llama.Model
	o      Options
	ctx    *llama.Context
	batch  *llama.Batch
	smp    *sampler.Sampler
	pieces *pieces
	stops  [][]byte
	// maxPieceLen is maxPiece's answer, found once.
	maxPieceOnce sync.Once
	maxPieceLen  int
	adapter      *llama.Adapter
	scale        float32
	// smpBy holds the samplers of Serve requests' own sampling settings.
	smpBy map[sampler.Params]*sampler.Sampler
	// rowIdx and rowW are sampleAll's scratch: a step's batch indices and
	// its rows' exp(logit - max).
	rowIdx []int32
	rowW   []float64
	// progress, set by Serve, sees each sequence after each token it keeps.
	progress func(p *dataset.Prompt, sample int, raw []byte, offsets []int, logprobs []float64, top [][]dataset.TopLogprob)
	// cancelled, set by Serve, takes the prompts of the groups dropped
	// because their request was given up (Request.Done).
	cancelled func(p *dataset.Prompt)
}

// NewEngine makes an engine for m. With Options.NCtx set the context is
// created now; otherwise on the first call, sized for its prompts.
func NewEngine(m *llama.Model, o Options) (*Engine, error) {
	if o.FlashAttn == "" && m.CPUOnly() {
		o.FlashAttn = "on"
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if o.SeqCtx == 0 {
		o.SeqCtx = m.Info().CtxTrain
	}
	if o.Threads == 0 {
		o.Threads = DefaultThreads(m) // threads.go: fitted to the model's size
	}
	smp, err := sampler.New(o.Params)
	if err != nil {
		return nil, err
	}
	e := &Engine{m: m, o: o, pieces: newPieces(m), smp: smp}
	for _, s := range o.Stop {
		e.stops = append(e.stops, []byte(s))
	}
	if o.NCtx > 0 {
		if err := e.ensureContext(o.NCtx); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Options are the engine's options, defaults filled in.
func (e *Engine) Options() Options { return e.o }

// Close frees the context and the batch. It is safe to call twice.
func (e *Engine) Close() error { return e.Release() }

// Release frees the context (its KV cache) and the batch until the next
// call, which makes them again: the RL loop releases its engines while it
// trains, and its greedy engine between evaluations, so that the KV caches
// and the training buffers are not held at once.
func (e *Engine) Release() error {
	var err error
	if e.ctx != nil {
		err = e.ctx.Close()
		e.ctx = nil
	}
	if e.batch != nil {
		err = errors.Join(err, e.batch.Close())
		e.batch = nil
	}
	return err
}

// SetAdapter applies a LoRA adapter with a scale (1 = as trained) to every
// later call; nil removes it. The context keeps its KV buffers: patch 0003
// makes llama.cpp build a new graph after the adapters change (it reused
// the previous one), which is faster than making the context anew
// (llama's BenchmarkAdapterSwap: rebuilt/in-place 1.9-2.1x in medians on
// the tiny model). On an error the engine holds no adapter.
func (e *Engine) SetAdapter(a *llama.Adapter, scale float32) error {
	e.adapter, e.scale = a, scale
	if e.ctx == nil {
		return nil
	}
	if err := e.applyAdapter(); err != nil {
		e.adapter = nil
		e.ctx.ClearAdapters()
		return err
	}
	return nil
}

func (e *Engine) applyAdapter() error {
	e.ctx.ClearAdapters()
	if e.adapter == nil {
		return nil
	}
	return e.ctx.SetAdapter(e.adapter, e.scale)
}

// ensureContext makes sure the context holds at least nctx tokens, creating
// it (again) when it does not.
func (e *Engine) ensureContext(nctx int) error {
	if e.ctx != nil && e.ctx.NCtx() >= nctx {
		return nil
	}
	e.Close()
	c, err := llama.NewContext(e.m, llama.ContextParams{
		NCtx: nctx, NBatch: e.o.NBatch, NSeqMax: e.o.Parallel, Threads: e.o.Threads,
		FlashAttn: e.o.fa, TypeK: e.o.kv, TypeV: e.o.kv,
	})
	if err != nil {
		return err
	}
	e.ctx = c
	e.batch = llama.NewBatch(e.o.NBatch, e.o.Parallel)
	if err := e.batch.Err(); err != nil {
		return err
	}
	return e.applyAdapter()
}

// RecordError is a prompt or record the engine could not use; the call goes
// on without it.
type RecordError struct {
	Index  int    `json:"index"` // position in the call's input
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (r RecordError) Error() string {
	return fmt.Sprintf("record %d (id %q): %s", r.Index+1, r.ID, r.Reason)
}

// Stats summarise one Generate call.
type Stats struct {
	Groups  int `json:"groups"`  // groups completed and emitted
	Records int `json:"records"` // completions emitted
	Tokens  int `json:"tokens"`  // completion tokens sampled
	// PromptTokens counts the prompt tokens decoded. A group's prompt is
	// decoded once for all its sequences (once per admission when Parallel
	// is smaller than the group).
	PromptTokens int           `json:"prompt_tokens"`
	Decodes      int           `json:"decodes"` // llama_decode calls
	Elapsed      time.Duration `json:"elapsed_ns"`
	Errors       []RecordError `json:"errors,omitempty"`
}

// TokensPerSecond is the completion tokens sampled per second of the call.
func (s Stats) TokensPerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Tokens) / s.Elapsed.Seconds()
}

// group is one prompt on its way through the engine.
type group struct {
	index    int // position in the call's prompts
	p        *dataset.Prompt
	rendered string
	toks     []llama.Token
	admitted int // samples given a sequence so far
	done     int
	recs     []dataset.Rollout
	// The group's settings: the engine's, or a Serve request's own.
	n         int // samples (G)
	maxTokens int
	seed      uint64
	stops     [][]byte
	smp       *sampler.Sampler
	top       int // alternatives recorded per token (0 = none)
	// gone, for a Serve request, is closed when the request is given up.
	gone <-chan struct{}
}

// givenUp reports whether the group's request was given up (Serve).
func (g *group) givenUp() bool {
	if g.gone == nil {
		return false
	}
	select {
	case <-g.gone:
		return true
	default:
		return false
	}
}

// sequence is one completion being generated in a slot (a KV sequence id).
type sequence struct {
	g        *group
	sample   int
	rng      *sampler.RNG
	pos      int         // position of the next token to decode (next)
	next     llama.Token // sampled, not yet decoded
	toks     []int32
	lp, slp  []float64
	ent, sc  []float64
	top      [][]dataset.TopLogprob // with group.top > 0
	text     *textBuilder
	promptMS float64
	first    time.Time // when its first token was sampled
}

// prefill is a prompt being decoded for the sequences of one admission.
type prefill struct {
	g     *group
	seqs  []int // slots
	fed   int   // prompt tokens decoded so far
	start time.Time
}

// row says what to do with one batch index's logits.
type row struct {
	slot int      // a generating sequence, or -1
	pf   *prefill // a finished prompt: sample the first token of its sequences
}

// prepare renders and tokenizes the prompts, reporting the bad ones.
func (e *Engine) prepare(prompts []dataset.Prompt, st *Stats) []*group {
	var gs []*group
	for i := range prompts {
		p := &prompts[i]
		bad := func(format string, args ...any) {
			st.Errors = append(st.Errors, RecordError{Index: i, ID: p.ID, Reason: fmt.Sprintf(format, args...)})
		}
		text, parseSpecial, err := e.render(p)
		if err != nil {
			bad("%v", err)
			continue
		}
		// A token covers at most maxPiece bytes: a longer text cannot fit
		// the context, and is refused before the tokenizer allocates for
		// it (a 50 MB prompt took 2 GB before its rejection).
		if len(text) > e.o.SeqCtx {
			if most := e.o.SeqCtx * e.maxPiece(); len(text) > most {
				bad("prompt of %d bytes cannot fit the %d-token context of one sequence (a token covers at most %d bytes)", len(text), e.o.SeqCtx, e.maxPiece())
				continue
			}
		}
		toks, err := e.m.Tokenize(text, true, parseSpecial)
		if err != nil {
			bad("tokenizing the prompt: %v", err)
			continue
		}
		if len(toks) == 0 {
			bad("the prompt has no tokens")
			continue
		}
		gs = append(gs, &group{index: i, p: p, rendered: text, toks: toks, recs: make([]dataset.Rollout, e.o.Group),
			n: e.o.Group, maxTokens: e.o.MaxTokens, seed: e.o.Seed, stops: e.stops, smp: e.smp, top: e.o.TopLogprobs})
	}
	return gs
}

// maxPiece is the most bytes of text one token stands for (special
// tokens' text included), found once.
func (e *Engine) maxPiece() int {
	e.maxPieceOnce.Do(func() {
		e.maxPieceLen = 1
		for t := range e.m.NVocab() {
			if b, err := e.m.TokenPiece(llama.Token(t), true); err == nil {
				e.maxPieceLen = max(e.maxPieceLen, len(b))
			}
		}
	})
	return e.maxPieceLen
}

// fit checks that the group's prompt and completions fit a sequence's
// limit of tokens, giving a group without a length limit (max tokens 0)
// the context that is left; it returns why not, or "".
func (g *group) fit(limit int) string {
	if g.maxTokens == 0 {
		if len(g.toks) >= limit {
			return fmt.Sprintf("prompt of %d tokens leaves no room for a completion in the %d-token context of one sequence", len(g.toks), limit)
		}
		g.maxTokens = limit - len(g.toks)
		return ""
	}
	if n := len(g.toks) + g.maxTokens; n > limit {
		return fmt.Sprintf("prompt of %d tokens + %d max tokens does not fit the %d-token context of one sequence", len(g.toks), g.maxTokens, limit)
	}
	return ""
}

// render is the text the model sees for a prompt: the raw prompt, or the
// messages (or the prompt as one user message, with Options.Chat) through the
// chat template. Special-token text is parsed as special tokens only in
// rendered chat, where the template put it.
func (e *Engine) render(p *dataset.Prompt) (string, bool, error) {
	if len(p.Messages) == 0 && p.Prompt == "" {
		return "", false, errors.New("empty prompt (no prompt text and no messages)")
	}
	// Text that is not UTF-8 would be tokenized as replacement characters:
	// a bad prompt (docs/rollout.md), whether the reader saw it (BadText)
	// or a caller passed it.
	if p.BadText != "" {
		return "", false, errors.New(p.BadText)
	}
	if bad := dataset.InvalidUTF8([]byte(p.Prompt)); bad != "" {
		return "", false, fmt.Errorf("prompt text is %s", bad)
	}
	for i, m := range p.Messages {
		if bad := dataset.InvalidUTF8([]byte(m.Role + m.Content)); bad != "" {
			return "", false, fmt.Errorf("message %d is %s", i+1, bad)
		}
	}
	if !e.isChat(p) {
		return p.Prompt, false, nil
	}
	text, err := RenderChat(e.m, e.o.ChatTemplate, p.Messages, p.Prompt)
	if err != nil {
		return "", false, fmt.Errorf("chat template: %w", err)
	}
	return text, true, nil
}

// isChat says whether p is rendered through a chat template: it has messages,
// or the options make every prompt a chat.
func (e *Engine) isChat(p *dataset.Prompt) bool { return len(p.Messages) > 0 || e.o.Chat }

// checkTemplate refuses chat prompts when neither the options nor the model
// give a chat template: every prompt would fail alike, so that is the
// caller's one error, not one bad record per prompt (a base model's GGUF
// such as Gemma 3 270M's carries none).
func (e *Engine) checkTemplate(prompts []dataset.Prompt) error {
	if e.o.ChatTemplate != "" || e.m.ChatTemplate() != "" {
		return nil
	}
	for i := range prompts {
		if e.isChat(&prompts[i]) {
			return fmt.Errorf("prompt %q is a chat, and %s has no chat template: name one with --chat-template or [model] chat_template (a template's text or a built-in name: chatml, llama3, gemma, ...)", prompts[i].ID, e.m.Path())
		}
	}
	return nil
}

// Generate samples Group completions for each prompt and calls emit with each
// group, its records in sample order, as soon as the whole group is done
// (groups finish in an order set by the options and the prompts, not by
// timing). A bad prompt is reported in Stats.Errors and skipped. Generate
// stops at the first error of emit or llama.cpp, or when ctx is cancelled;
// the groups emitted by then are complete.
func (e *Engine) Generate(ctx context.Context, prompts []dataset.Prompt, emit func(group []dataset.Rollout) error) (Stats, error) {
	start := time.Now()
	var st Stats
	defer func() { st.Elapsed = time.Since(start) }()

	if err := e.checkTemplate(prompts); err != nil {
		return st, err
	}
	all := e.prepare(prompts, &st)
	// Each sequence gets a budget of perSeq cells; the prompt cells a group
	// shares only leave more room, so the cache never overflows.
	perSeq := 0
	if e.o.NCtx > 0 {
		perSeq = e.o.NCtx / e.o.Parallel
	}
	limit := e.o.SeqCtx
	if perSeq > 0 {
		limit = perSeq
	}
	gs := all[:0]
	for _, g := range all {
		if reason := g.fit(limit); reason != "" {
			st.Errors = append(st.Errors, RecordError{Index: g.index, ID: g.p.ID, Reason: reason})
			continue
		}
		gs = append(gs, g)
	}
	if len(gs) == 0 {
		return st, nil
	}
	if e.o.NCtx == 0 {
		longest := 0
		for _, g := range gs {
			longest = max(longest, len(g.toks)+g.maxTokens)
		}
		perSeq = (longest + 63) / 64 * 64 // rounded, so similar calls reuse the context
		if err := e.ensureContext(e.o.Parallel * perSeq); err != nil {
			return st, err
		}
	}
	err := e.generate(ctx, gs, &st, emit, nil)
	st.Elapsed = time.Since(start)
	return st, err
}

// generate runs the decode loop over waiting. feed, when set, brings groups
// that arrived since (Serve): it is asked without waiting before each step,
// and, waiting, when nothing is left to decode; nil then ends the loop.
func (e *Engine) generate(ctx context.Context, waiting []*group, st *Stats, emit func([]dataset.Rollout) error, feed func(wait bool) []*group) error {
	defer pinThread()()
	c, b := e.ctx, e.batch
	c.ClearKV()
	slots := make([]*sequence, e.o.Parallel)
	free := make([]int, 0, e.o.Parallel)
	for s := e.o.Parallel - 1; s >= 0; s-- {
		free = append(free, s) // popped from the back: slot 0 first
	}
	var prefills []*prefill
	rows := make([]row, 0, e.o.NBatch)
	var draws []draw

	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if feed != nil {
			waiting = append(waiting, feed(false)...)
			waiting, prefills = e.dropGivenUp(c, slots, &free, waiting, prefills)
		}
		// Admit the next group's remaining samples once there are enough
		// free slots for all of them (or all slots, when the group is
		// larger): a prompt is then decoded once for as many of its
		// sequences as possible.
		for len(waiting) > 0 {
			g := waiting[0]
			n := min(g.n-g.admitted, e.o.Parallel)
			if len(free) < n {
				break
			}
			pf := &prefill{g: g}
			for range n {
				s := free[len(free)-1]
				free = free[:len(free)-1]
				slots[s] = &sequence{
					g: g, sample: g.admitted, rng: sampler.NewRNG(g.seed, g.p.ID, g.admitted),
					pos: len(g.toks), text: newTextBuilder(g.stops),
				}
				pf.seqs = append(pf.seqs, s)
				g.admitted++
			}
			prefills = append(prefills, pf)
			if g.admitted == g.n {
				waiting = waiting[1:]
			}
		}

		// One token for each generating sequence, then prompt tokens.
		b.Clear()
		rows = rows[:0]
		for s, q := range slots {
			if q == nil || q.first.IsZero() {
				continue // free, or its prompt is not decoded yet
			}
			if _, err := b.Add(q.next, q.pos, []int{s}, true); err != nil {
				return err
			}
			q.pos++
			rows = append(rows, row{slot: s})
		}
		for _, pf := range prefills {
			for pf.fed < len(pf.g.toks) && b.Len() < b.Cap() {
				if pf.fed == 0 {
					pf.start = time.Now()
				}
				last := pf.fed == len(pf.g.toks)-1
				if _, err := b.Add(pf.g.toks[pf.fed], pf.fed, pf.seqs, last); err != nil {
					return err
				}
				pf.fed++
				st.PromptTokens++
				if last {
					rows = append(rows, row{slot: -1, pf: pf})
				} else {
					rows = append(rows, row{slot: -2})
				}
			}
		}
		if b.Len() == 0 {
			if feed != nil {
				if more := feed(true); len(more) > 0 {
					waiting = append(waiting, more...)
					continue
				}
			}
			return nil // nothing in flight and nothing waiting
		}
		if err := c.Decode(b); err != nil {
			return err
		}
		st.Decodes++
		now := time.Now()

		draws = draws[:0]
		for i, r := range rows {
			switch {
			case r.slot >= 0:
				draws = append(draws, draw{i: i, slot: r.slot})
			case r.pf != nil:
				ms := float64(now.Sub(r.pf.start).Microseconds()) / 1000
				for _, s := range r.pf.seqs {
					slots[s].promptMS = ms
					slots[s].first = now
					draws = append(draws, draw{i: i, slot: s})
				}
			}
		}
		if err := e.sampleAll(c, slots, draws); err != nil {
			return err
		}
		for _, d := range draws {
			if err := e.step(c, slots, d, now, st, &free, emit); err != nil {
				return err
			}
		}
		// Drop the prefills whose prompt is now fully decoded.
		kept := prefills[:0]
		for _, pf := range prefills {
			if pf.fed < len(pf.g.toks) {
				kept = append(kept, pf)
			}
		}
		prefills = kept
	}
}

// dropGivenUp frees the slots and cells of the groups whose request was
// given up (a client that left: Serve's Request.Done), removes them from
// the waiting groups and the prefills, and hands each to e.cancelled once.
// A slot so freed takes the next prompt at this very step.
func (e *Engine) dropGivenUp(c *llama.Context, slots []*sequence, free *[]int, waiting []*group, prefills []*prefill) ([]*group, []*prefill) {
	var gone []*group
	note := func(g *group) {
		if !slices.Contains(gone, g) {
			gone = append(gone, g)
		}
	}
	for s, q := range slots {
		if q != nil && q.g.givenUp() {
			c.SeqRemove(s, -1, -1)
			slots[s] = nil
			*free = append(*free, s)
			note(q.g)
		}
	}
	if gone == nil && !slices.ContainsFunc(waiting, (*group).givenUp) {
		return waiting, prefills
	}
	prefills = slices.DeleteFunc(prefills, func(pf *prefill) bool { return pf.g.givenUp() })
	waiting = slices.DeleteFunc(waiting, func(g *group) bool {
		if g.givenUp() {
			note(g)
			return true
		}
		return false
	})
	for _, g := range gone {
		if e.cancelled != nil {
			e.cancelled(g.p)
		}
	}
	return waiting, prefills
}

// draw is one token to sample: sequence slot's, from batch index i.
type draw struct {
	i, slot int
	ch      sampler.Choice
	top     []sampler.Alt // with the group's top > 0
}

// sampleRows is how many rows sampleAll summarises in one call: their
// exponentials (rowW) are 8 bytes a logit.
const sampleRows = 32

// sampleAll samples every draw of a step. The full-vocabulary pass that the
// log-probs and the draw need (each row's maximum, Σ exp, the entropy's sum
// and the exponentials) is the engine's main cost next to decoding; it runs
// in C on the decode's own OpenMP team (llama.Context.LogitRows), whose
// workers are spinning between two graphs and would otherwise share their
// cores with any goroutine started here. What is left per row (the draw's
// cumulative sum, the top alternatives) is done here, in order. The results
// do not depend on the number of threads.
func (e *Engine) sampleAll(c *llama.Context, slots []*sequence, draws []draw) error {
	nv := e.m.NVocab()
	for start := 0; start < len(draws); start += sampleRows {
		part := draws[start:min(start+sampleRows, len(draws))]
		e.rowIdx = e.rowIdx[:0]
		needW := false
		for _, d := range part {
			e.rowIdx = append(e.rowIdx, int32(d.i))
			needW = needW || slots[d.slot].g.smp.Params().Temperature > 0
		}
		var w []float64
		if needW {
			if cap(e.rowW) < len(part)*nv {
				e.rowW = make([]float64, min(len(draws), sampleRows)*nv)
			}
			w = e.rowW[:len(part)*nv]
		}
		rows, err := c.LogitRows(e.rowIdx, w)
		if err != nil {
			return err
		}
		for k := range part {
			d := &part[k]
			q := slots[d.slot]
			if err := e.sampleOne(c, q, d, rows[k], w, k*nv, nv); err != nil {
				return fmt.Errorf("prompt %q sample %d, token %d: %w", q.g.p.ID, q.sample, len(q.toks)+1, err)
			}
		}
	}
	return nil
}

// sampleOne draws d's token from its summarised row; w[off:off+nv] holds the
// row's exponentials (w is nil for greedy groups).
func (e *Engine) sampleOne(c *llama.Context, q *sequence, d *draw, row llama.LogitRow, w []float64, off, nv int) error {
	logits, err := c.Logits(d.i)
	if err != nil {
		return err
	}
	st, err := rowStats(logits, row)
	if err != nil {
		return err
	}
	var wr []float64
	if w != nil {
		wr = w[off : off+nv]
	}
	var top []sampler.Alt
	if q.g.top > 0 {
		top = make([]sampler.Alt, 0, q.g.top)
	}
	d.ch, d.top, err = q.g.smp.SampleScanned(logits, wr, st, q.rng, q.g.top, top)
	return err
}

// rowStats is a row LogitRows summarised, as the sampler's Stats; a row
// with a NaN or +Inf, or no finite logit, is sampler.Scan's error, which
// says which logit and why.
func rowStats(logits []float32, row llama.LogitRow) (sampler.Stats, error) {
	if row.Bad != -1 {
		if _, err := sampler.Scan(logits, nil); err != nil {
			return sampler.Stats{}, err
		}
		return sampler.Stats{}, fmt.Errorf("logits row: %w", sampler.ErrBadLogits)
	}
	return sampler.Stats{Max: row.Max, Argmax: row.Argmax, Sum: row.Sum, Dot: row.Dot, Mean: row.Mean, Support: int(row.Support)}, nil
}

// pinThread locks the calling goroutine to its OS thread for a decode loop
// and returns the unlock. ggml's CPU backend runs a graph on an OpenMP team
// whose workers belong to the thread that starts it: decodes started from
// different OS threads (a goroutine moves between them) each get a team of
// their own, and the idle teams' spinning workers take cores from the one
// at work. One thread for the whole loop keeps one team, and LogitRows runs
// on it too.
func pinThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// step applies a sampled token to its sequence and the stop rules; a
// finished sequence frees its slot, and a finished group is emitted.
func (e *Engine) step(c *llama.Context, slots []*sequence, d draw, now time.Time, st *Stats, free *[]int, emit func([]dataset.Rollout) error) error {
	s, ch := d.slot, d.ch
	q := slots[s]
	st.Tokens++
	q.toks = append(q.toks, ch.Token)
	q.lp = append(q.lp, ch.LogProb)
	q.slp = append(q.slp, ch.SamplingLogProb)
	q.ent = append(q.ent, ch.Entropy)
	q.sc = append(q.sc, ch.SelfCertainty)
	if q.g.top > 0 {
		alts, err := e.topOf(d.top)
		if err != nil {
			return err
		}
		q.top = append(q.top, alts)
	}
	piece, err := e.pieces.of(ch.Token)
	if err != nil {
		return err
	}
	finish := ""
	switch stopAt := q.text.add(piece); {
	case e.pieces.isEOG(ch.Token):
		finish = dataset.FinishStop
	case stopAt >= 0:
		keep := q.text.cutAt(stopAt)
		q.toks, q.lp, q.slp, q.ent, q.sc = q.toks[:keep], q.lp[:keep], q.slp[:keep], q.ent[:keep], q.sc[:keep]
		if q.top != nil {
			q.top = q.top[:keep]
		}
		finish = dataset.FinishStop
	case len(q.toks) >= q.g.maxTokens:
		finish = dataset.FinishLength
	}
	if finish == "" {
		q.next = ch.Token
		if e.progress != nil {
			e.progress(q.g.p, q.sample, q.text.raw, q.text.offsets, q.lp, q.top)
		}
		return nil
	}

	// The sequence is done: free its cells and slot, and file its record.
	c.SeqRemove(s, -1, -1)
	slots[s] = nil
	*free = append(*free, s)
	g := q.g
	text, offsets := q.text.finish()
	rec := dataset.Rollout{
		Schema: dataset.SchemaRollout, PromptID: g.p.ID, Prompt: g.rendered, Answer: g.p.Answer, Verifier: g.p.Verifier,
		Messages: g.p.Messages, Meta: g.p.Meta,
		Sample: q.sample, Seed: g.seed, PromptTokens: g.toks, Tokens: q.toks, Text: text,
		Logprobs: q.lp, SamplingLogprobs: q.slp, Entropies: q.ent, SelfCertainties: q.sc, Finish: finish, TokenOffsets: offsets,
		TopLogprobs: q.top,
	}
	if !e.o.NoTiming {
		rec.Timing = &dataset.Timing{PromptMS: q.promptMS, GenerateMS: float64(now.Sub(q.first).Microseconds()) / 1000}
	}
	g.recs[q.sample] = rec
	g.done++
	if g.done < g.n {
		return nil
	}
	st.Groups++
	st.Records += len(g.recs)
	return emit(g.recs)
}

// topOf is a token's alternatives with their text: the piece, or for an
// end-of-generation token (which has none in the completion) its special
// text.
func (e *Engine) topOf(alts []sampler.Alt) ([]dataset.TopLogprob, error) {
	out := make([]dataset.TopLogprob, len(alts))
	for i, a := range alts {
		b, err := e.pieces.of(a.Token)
		if err != nil {
			return nil, err
		}
		if e.pieces.isEOG(a.Token) {
			if b, err = e.m.TokenPiece(a.Token, true); err != nil {
				return nil, err
			}
		}
		out[i] = dataset.TopLogprob{Token: a.Token, Piece: string(b), Logprob: a.LogProb}
	}
	return out, nil
}
