// Package verify checks completions against reference answers with a
// verifier, without a model: confclip verify, one completion or a file of
// them.
package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/shard"
	"github.com/confclip/confclip/verifiers"
)

// Result is a verifier's judgement of one completion.
type Result struct {
	Correct    bool    `json:"correct"`
	Score      float64 `json:"score"`
	Extracted  string  `json:"extracted"`
	AnswerSpan []int   `json:"answer_span"` // [start, end) in the completion, null when nothing was extracted
	Reason     string  `json:"reason"`
}

func toResult(r verifiers.Result) Result {
	out := Result{Correct: r.Correct, Score: r.Score, Extracted: r.Extracted, Reason: r.Reason}
	if r.Start >= 0 {
		out.AnswerSpan = []int{r.Start, r.End}
	}
	return out
}

// One checks one completion against a reference answer with the
// verifier the [verifier] table names.
func One(ctx context.Context, vc verifiers.Config, completion, answer string) (Result, error) {
	v, err := vc.New()
	if err != nil {
		return Result{}, err
	}
	r, err := v.Verify(ctx, completion, answer)
	if err != nil {
		return Result{}, err
	}
	return toResult(r), nil
}

// FileOptions say what File checks and where the results go.
type FileOptions struct {
	Verifier verifiers.Config
	In       string // JSONL lines with string fields "answer" and "completion"
	// Out receives one Result a line, in input order, written
	// atomically; when "", they go to W.
	Out string
	W   io.Writer
	// Jobs is how many verifications run at once; 0 = the cores.
	Jobs int
	// Shard, when set, verifies only the lines of one shard (package shard), by
	// their prompt_id (or id), or by line for lines without one; each
	// result then also has the input's line and id.
	Shard shard.Shard
}

// Summary counts what File checked.
type Summary struct {
	Records int `json:"records"`
	Correct int `json:"correct"`
}

// shardResult is a result of a sharded File: the input line (and id)
// it answers, and the result.
type shardResult struct {
	Line int    `json:"line"`
	ID   string `json:"prompt_id,omitempty"`
	Result
}

// verifyInput is one line of FileOptions.In; other fields are ignored.
type verifyInput struct {
	Answer     *string `json:"answer"`
	Completion *string `json:"completion"`
	PromptID   string  `json:"prompt_id"`
	ID         string  `json:"id"`
}

// File verifies every line of In and writes the results, line for
// line. Lines are verified in batches, Jobs at a time, and written in input
// order. An error names the file and line.
func File(ctx context.Context, o FileOptions) (sum Summary, err error) {
	v, jobs, err := o.verifier()
	if err != nil {
		return sum, err
	}
	f, err := os.Open(o.In)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	r := dataset.NewReader(f, o.In)
	write, finish, err := o.output()
	if err != nil {
		return sum, err
	}
	defer func() { err = finish(err) }() // err is the named result: commit only a complete run

	batch := make([]verifyItem, 0, 64*jobs)
	flush := func() error {
		verifyAll(ctx, v, batch, jobs)
		if err := o.writeResults(batch, write, &sum); err != nil {
			return err
		}
		batch = batch[:0]
		return nil
	}
	for {
		var rec verifyInput
		err := r.Next(&rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, err
		}
		if !o.Shard.Has(shard.Key(cmp.Or(rec.PromptID, rec.ID), r.Line())) {
			continue
		}
		if rec.Answer == nil || rec.Completion == nil {
			return sum, &dataset.LineError{File: o.In, Line: r.Line(), Err: errors.New(`want string fields "answer" and "completion"`)}
		}
		batch = append(batch, verifyItem{line: r.Line(), id: cmp.Or(rec.PromptID, rec.ID), answer: *rec.Answer, completion: *rec.Completion})
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return sum, err
			}
		}
	}
	if err := flush(); err != nil {
		return sum, err
	}
	if sum.Records == 0 && !o.Shard.Enabled() { // a shard may hold no line
		return sum, fmt.Errorf("%s: nothing to verify", o.In)
	}
	return sum, nil
}

// verifier checks the options and builds the verifier; jobs is how many
// verifications run at once.
func (o FileOptions) verifier() (v verifiers.Verifier, jobs int, err error) {
	if err := atomicfile.NotInput(o.Out, o.In); err != nil {
		return nil, 0, err
	}
	if err := (pipeline.Config{Verifier: o.Verifier}).ValidateTables("verifier"); err != nil {
		return nil, 0, err
	}
	if o.Jobs < 0 || o.Jobs > pipeline.MaxJobs {
		return nil, 0, fmt.Errorf("jobs = %d: want 0 (the cores) to %d", o.Jobs, pipeline.MaxJobs)
	}
	if v, err = o.Verifier.New(); err != nil {
		return nil, 0, err
	}
	jobs = o.Jobs
	if jobs <= 0 {
		jobs = runtime.NumCPU()
	}
	return v, jobs, nil
}

// output is where the results go: o.Out, written atomically (finish
// commits it when the run ended without error, else removes it), or o.W.
func (o FileOptions) output() (write func(any) error, finish func(error) error, err error) {
	if o.Out == "" {
		w := o.W
		if w == nil {
			w = io.Discard
		}
		enc := json.NewEncoder(w)
		return func(v any) error { return enc.Encode(v) }, func(err error) error { return err }, nil
	}
	dw, err := dataset.Create(o.Out)
	if err != nil {
		return nil, nil, err
	}
	return dw.Write, func(err error) error {
		if err != nil {
			dw.Abort()
			return err
		}
		return dw.Commit()
	}, nil
}

// verifyItem is one input line and its verdict.
type verifyItem struct {
	line               int
	id                 string
	answer, completion string
	res                verifiers.Result
	err                error
}

// verifyAll verifies a batch, jobs at a time.
func verifyAll(ctx context.Context, v verifiers.Verifier, batch []verifyItem, jobs int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, jobs)
	for i := range batch {
		wg.Add(1)
		sem <- struct{}{}
		go func(it *verifyItem) {
			defer func() { <-sem; wg.Done() }()
			it.res, it.err = v.Verify(ctx, it.completion, it.answer)
		}(&batch[i])
	}
	wg.Wait()
}

// writeResults writes a verified batch's results in input order, stopping
// at the first line that could not be verified.
func (o FileOptions) writeResults(batch []verifyItem, write func(any) error, sum *Summary) error {
	for _, it := range batch {
		if it.err != nil {
			return &dataset.LineError{File: o.In, Line: it.line, Err: it.err}
		}
		var out any = toResult(it.res)
		if o.Shard.N > 0 { // 0/1 too, so that every N reads alike
			// A shard's results say which input line they answer.
			out = shardResult{Line: it.line, ID: it.id, Result: toResult(it.res)}
		}
		if err := write(out); err != nil {
			return err
		}
		sum.Records++
		if it.res.Correct {
			sum.Correct++
		}
	}
	return nil
}
