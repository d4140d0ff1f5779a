package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/internal/peakrss"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

// trainerConfig is the [train] table with what the trainer takes from
// the other tables: the rollout's max tokens (seq_mean_token_sum_norm), the
// threads, and the updates a run makes (the schedule's length).
func trainerConfig(cfg Config) train.Config {
	t := cfg.Train
	t.MaxTokens, t.Threads, t.TotalSteps = maxCompletion(cfg), cfg.Model.Threads, cfg.Run.Steps*max(t.Iterations, 1)
	return t
}

// maxCompletion is the longest a completion can be: rollout.max_tokens, or
// with 0 (the context left after the prompt) the context itself.
func maxCompletion(cfg Config) int {
	if cfg.Rollout.MaxTokens > 0 {
		return cfg.Rollout.MaxTokens
	}
	return cfg.Model.Ctx
}

// TrainOptions says what `confclip train` does.
type TrainOptions struct {
	Config     Config
	Data       string // exported training set (JSONL or Parquet)
	AdapterIn  string // start from this adapter ("" = a new one)
	AdapterOut string
	Steps      int // optimiser steps over the data (1 = one on-policy step)
	// Progress, when set, is called after each step.
	Progress func(step int, st train.StepStats)
	// Note, when set, gets one-line remarks before the steps (how the
	// micro-batch was sized).
	Note func(string)
	// Profile, when set, receives the time and bytes by ggml op, forward
	// and backward, of the steps (llama.WriteProfile's table).
	Profile io.Writer
}

// TrainSummary is what a `confclip train` run did.
type TrainSummary struct {
	Examples   int               `json:"examples"`
	Steps      []train.StepStats `json:"steps"`
	AdapterOut string            `json:"adapter_out"`
	NewAdapter bool              `json:"new_adapter"`
	// MicroBatch is the tokens packed into one pass ([train] micro_batch, or
	// the size chosen from the model); ComputeBufferBytes the training
	// context's activations at the largest pass; PeakRSSBytes the process's
	// peak resident memory, weights included (0 where unknown).
	MicroBatch int `json:"micro_batch"`
	// Sizing says how MicroBatch was chosen (train.Trainer.Sizing), and
	// MemoryBudgetBytes the activations' budget it was sized for (0: given).
	Sizing             string `json:"micro_batch_sizing"`
	MemoryBudgetBytes  int64  `json:"memory_budget_bytes"`
	ComputeBufferBytes int64  `json:"compute_buffer_bytes"`
	PeakRSSBytes       int64  `json:"peak_rss_bytes"`
}

// Examples converts exported records into the trainer's examples: a
// completion whose mask is all zeros is masked (out of the loss and its
// denominators), one whose mask keeps some tokens trains on those only, and
// old_logprobs become the ratio's old log-probs.
func Examples(recs []dataset.TrainExample) []train.Example {
	exs := make([]train.Example, len(recs))
	for i, r := range recs {
		exs[i] = train.Example{Prompt: r.PromptIDs, Completion: r.CompletionIDs, Advantage: r.Advantage,
			Masked: len(r.CompletionMask) > 0 && !slices.Contains(r.CompletionMask, 1)}
		if slices.Contains(r.CompletionMask, 0) && slices.Contains(r.CompletionMask, 1) {
			m := make([]bool, len(r.CompletionMask))
			for k, v := range r.CompletionMask {
				m[k] = v == 1
			}
			exs[i].Mask = m
		}
		if len(r.OldLogprobs) == len(r.CompletionIDs) {
			old := make([]float32, len(r.OldLogprobs))
			for k, v := range r.OldLogprobs {
				old[k] = float32(v)
			}
			exs[i].OldLogProbs = old
		}
	}
	return exs
}

// CheckTrainExamples checks that every example's columns match its tokens
// (docs/export.md): a completion, completion_mask and advantages of one
// entry per completion token (when present), a mask of zeros and ones, the
// same advantage on every token as in advantage, and finite numbers. The error
// names the file, the record (1-based) and its prompt and sample.
func CheckTrainExamples(path string, recs []dataset.TrainExample) error {
	for i, r := range recs {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: record %d (prompt %q sample %d): %s", path, i+1, r.PromptID, r.Sample, fmt.Sprintf(format, args...))
		}
		n := len(r.CompletionIDs)
		switch {
		case len(r.PromptIDs) == 0:
			return bad("no prompt_ids")
		case n == 0:
			return bad("no completion_ids")
		case len(r.CompletionMask) > 0 && len(r.CompletionMask) != n:
			return bad("completion_mask has %d entries for %d completion tokens", len(r.CompletionMask), n)
		case len(r.Advantages) > 0 && len(r.Advantages) != n:
			return bad("advantages has %d entries for %d completion tokens", len(r.Advantages), n)
		case len(r.OldLogprobs) > 0 && len(r.OldLogprobs) != n:
			return bad("old_logprobs has %d entries for %d completion tokens", len(r.OldLogprobs), n)
		case math.IsNaN(r.Advantage) || math.IsInf(r.Advantage, 0):
			return bad("advantage %v is not a finite number", r.Advantage)
		}
		for k, v := range r.CompletionMask {
			if v != 0 && v != 1 {
				return bad("completion_mask[%d] = %d: want 0 or 1", k, v)
			}
		}
		for k, v := range r.Advantages {
			if v != r.Advantage {
				return bad("advantages[%d] = %v differs from advantage = %v: the trainer takes one advantage per completion", k, v, r.Advantage)
			}
		}
		for k, v := range r.OldLogprobs {
			if math.IsNaN(v) || v > 0 {
				return bad("old_logprobs[%d] = %v: not a log-probability", k, v)
			}
		}
	}
	return nil
}

// Train runs policy-gradient steps on a LoRA adapter over an exported
// training set and writes the adapter.
func Train(ctx context.Context, o TrainOptions) (TrainSummary, error) {
	var sum TrainSummary
	cfg := o.Config
	recs, err := o.examples()
	if err != nil {
		return sum, err
	}
	sum.Examples = len(recs)
	mc := cfg.Model
	mc.Adapter = ""                  // the adapter trained here is loaded below
	h, err := openModelFor(mc, true) // to train: no repacking, precision warnings
	if err != nil {
		return sum, err
	}
	defer h.Close()
	in, cleanup, err := o.adapterIn(h)
	if err != nil {
		return sum, err
	}
	defer cleanup()
	sum.NewAdapter = o.AdapterIn == ""
	if err := h.LoadAdapter(in); err != nil {
		return sum, err
	}
	tcfg := trainerConfig(cfg)
	tcfg.Profile = o.Profile != nil
	tr, err := train.NewLoRATrainer(h.llm, h.adapter, tcfg)
	if err != nil {
		return sum, err
	}
	defer tr.Close()
	if o.Note != nil {
		o.Note(tr.Sizing())
	}
	exs := Examples(recs)
	if t := cfg.Train.Temperature; t != 1 && slices.ContainsFunc(exs, func(e train.Example) bool { return e.OldLogProbs != nil }) {
		// An export's old log-probs are the sampler's at temperature 1;
		// the ratio needs them at train.temperature: the current
		// adapter's, as if it had sampled them (ratio 1 at the first update).
		for i := range exs {
			exs[i].OldLogProbs = nil
		}
		if o.Note != nil {
			o.Note(fmt.Sprintf("train.temperature %g: the examples' old log-probs are at temperature 1 and are not used; the first update takes the current adapter as the one that sampled them (ratio 1)", t))
		}
	}
	for i := 0; i < o.Steps; i++ {
		st, err := tr.Step(ctx, exs)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", o.Data, err)
		}
		sum.Steps = append(sum.Steps, st)
		if o.Progress != nil {
			o.Progress(i+1, st)
		}
	}
	if o.Profile != nil {
		if err := llama.WriteProfile(o.Profile, tr.Profile()); err != nil {
			return sum, err
		}
	}
	if err := train.SaveLoRA(h.adapter, h.llm.Architecture(), o.AdapterOut); err != nil {
		return sum, err
	}
	sum.AdapterOut = o.AdapterOut
	sum.MicroBatch, sum.Sizing, sum.MemoryBudgetBytes = tr.Config().MicroBatch, tr.Sizing(), tr.MemoryBudget()
	sum.ComputeBufferBytes = tr.ComputeBufferBytes()
	sum.PeakRSSBytes = peakrss.Bytes()
	return sum, nil
}

// examples checks the options and reads the training set, refusing what
// the trainer cannot take before the model is loaded.
func (o TrainOptions) examples() ([]dataset.TrainExample, error) {
	cfg := o.Config
	if cfg.Model.Path == "" {
		return nil, ErrNoModel
	}
	if o.AdapterOut == "" {
		return nil, errors.New("no adapter output path given (--adapter-out)")
	}
	if err := atomicfile.NotInput(o.AdapterOut, o.Data, cfg.Model.Path, o.AdapterIn); err != nil {
		return nil, err
	}
	if o.Steps < 1 {
		return nil, fmt.Errorf("steps = %d: want at least 1 optimiser step", o.Steps)
	}
	if err := cfg.ValidateTables("model", "train"); err != nil {
		return nil, err
	}
	recs, err := dataset.ReadTrainExamples(o.Data)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no training examples", o.Data)
	}
	if err := CheckTrainExamples(o.Data, recs); err != nil {
		return nil, err
	}
	// A sequence's activations grow with its length (attention with its
	// square): one longer than the context is refused before anything is
	// allocated for it (8,606 tokens took 5 GB for a 186K-parameter model).
	for i, r := range recs {
		if n := len(r.PromptIDs) + len(r.CompletionIDs); n > cfg.Model.Ctx {
			return nil, fmt.Errorf("%s: record %d (prompt_id %q, sample %d): a sequence of %d tokens, longer than model.ctx = %d",
				o.Data, i+1, r.PromptID, r.Sample, n, cfg.Model.Ctx)
		}
	}
	return recs, nil
}

// adapterIn is the adapter training starts from: AdapterIn, or a new one
// in a temporary file (cleanup removes it).
func (o TrainOptions) adapterIn(h *Model) (path string, cleanup func(), err error) {
	if o.AdapterIn != "" {
		return o.AdapterIn, func() {}, nil
	}
	tmp, err := os.CreateTemp("", "confclip-lora-*.gguf")
	if err != nil {
		return "", nil, err
	}
	tmp.Close()
	cleanup = func() { os.Remove(tmp.Name()) }
	if err := train.CreateLoRA(h.llm, tmp.Name(), o.Config.Train); err != nil {
		cleanup()
		return "", nil, err
	}
	return tmp.Name(), cleanup, nil
}
