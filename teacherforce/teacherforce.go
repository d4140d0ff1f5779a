// Package teacherforce runs given completions through a model: their
// per-token log-probs and entropies (confclip logprobs).
package teacherforce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/shard"
)

// Options say which records File runs through the
// model.
type Options struct {
	Config pipeline.Config // [model] ctx, threads, chat_template
	In     string          // rollout-shaped records: prompt (or prompt_tokens) and text (or tokens)
	Out    string          // the records with tokens, logprobs, entropies and offsets, written atomically
	// SkipBad skips malformed lines of In, counting them, instead of stopping.
	SkipBad bool
	// Chunk is how many records one pass takes, so that progress shows and
	// memory stays bounded on large files; 0 = 256.
	Chunk int
	// Progress, when set, receives a pipeline.TeacherForceProgress after each chunk.
	Progress func(pipeline.Event)
	// Shard, when set, takes only the records of one shard (package shard), by
	// prompt_id, or by line for records without one.
	Shard shard.Shard
}

// Result is what File did.
type Result struct {
	Out     string        `json:"out"`
	Records int           `json:"records"`
	Tokens  int           `json:"tokens"` // completion tokens scored
	Elapsed time.Duration `json:"elapsed_ns"`
	Skipped []string      `json:"skipped_lines"`
}

// File computes the model's per-token log-probs and entropies of
// given completions (records produced elsewhere, or by another model) and
// writes the records with them. An error names the file and line.
func File(ctx context.Context, m *pipeline.Model, o Options) (Result, error) {
	res := Result{Out: o.Out}
	if err := atomicfile.NotInput(o.Out, o.In, o.Config.Model.Path); err != nil {
		return res, err
	}
	chunk := o.Chunk
	if chunk <= 0 {
		chunk = 256
	}
	recs, lines, skipped, err := dataset.ReadFile[dataset.Rollout](o.In, o.SkipBad)
	if err != nil {
		return res, err
	}
	for _, s := range skipped {
		res.Skipped = append(res.Skipped, s.Error())
	}
	if o.Shard.Enabled() {
		if err := o.Shard.Check(); err != nil {
			return res, err
		}
		var sr []dataset.Rollout
		var sl []int
		for i := range recs {
			if o.Shard.Has(shard.Key(recs[i].PromptID, lines[i])) {
				sr, sl = append(sr, recs[i]), append(sl, lines[i])
			}
		}
		recs, lines = sr, sl
	}
	e, err := m.NewEngine(pipeline.EngineOptions(o.Config))
	if err != nil {
		return res, err
	}
	defer m.ReleaseEngine(e)
	w, err := dataset.Create(o.Out)
	if err != nil {
		return res, err
	}
	start := time.Now()
	for lo := 0; lo < len(recs); lo += chunk {
		hi := min(lo+chunk, len(recs))
		ptrs := make([]*dataset.Rollout, hi-lo)
		for i := range ptrs {
			ptrs[i] = &recs[lo+i]
		}
		if err := e.TeacherForce(ctx, ptrs); err != nil {
			w.Abort()
			var re rollout.RecordError
			if errors.As(err, &re) && re.Index >= 0 && lo+re.Index < len(lines) {
				return res, fmt.Errorf("%s:%d: id %q: %s", o.In, lines[lo+re.Index], re.ID, re.Reason)
			}
			return res, fmt.Errorf("%s: %w", o.In, err)
		}
		for _, r := range ptrs {
			if r.Schema == "" {
				r.Schema = dataset.SchemaRollout
			}
			res.Tokens += len(r.Tokens)
			if err := w.Write(r); err != nil {
				w.Abort()
				return res, err
			}
		}
		res.Records = hi
		if o.Progress != nil {
			o.Progress(pipeline.TeacherForceProgress{Records: hi, Total: len(recs)})
		}
	}
	if err := w.Commit(); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	return res, nil
}
