package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/verifiers"
)

func init() {
	register(&cli.Command{
		Name:  "verify",
		Usage: "check completions against reference answers with a verifier (no model needed)",
		UsageText: "confclip verify --verifier math --answer REF --completion TEXT\n" +
			"confclip verify --verifier math --data cases.jsonl --out results.jsonl",
		Description: "With --answer and --completion, prints one result as JSON. With --data, reads JSON lines\n" +
			"with \"answer\" and \"completion\" and writes one result a line, in order, to --out (atomically)\n" +
			"or to standard output. Results have correct, score, extracted, answer_span and reason.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "verifier", Usage: "math, exact, choice, format or command ([verifier] name)"},
			&cli.StringFlag{Name: "answer", Usage: "the reference answer"},
			&cli.StringFlag{Name: "completion", Usage: "the completion to check"},
			&cli.StringFlag{Name: "data", Usage: "JSONL `FILE` of {\"answer\", \"completion\"} lines"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "results `FILE` (JSONL) for --data; standard output when absent"},
			&cli.StringFlag{Name: "pattern", Usage: "format: regular expression ([verifier] pattern)"},
			&cli.BoolFlag{Name: "json", Usage: "format: the completion must be JSON ([verifier] json)"},
			&cli.DurationFlag{Name: "timeout", Usage: "per verification, e.g. 2s ([verifier] timeout_ms)"},
			&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: runtime.NumCPU(), Usage: "verifications run in parallel with --data"},
		},
		Action: verifyAction,
	})
}

// verifyResult is what the command prints for one completion.
type verifyResult struct {
	Correct    bool    `json:"correct"`
	Score      float64 `json:"score"`
	Extracted  string  `json:"extracted"`
	AnswerSpan []int   `json:"answer_span"` // [start, end) in the completion, null when nothing was extracted
	Reason     string  `json:"reason"`
}

func toVerifyResult(r verifiers.Result) verifyResult {
	out := verifyResult{Correct: r.Correct, Score: r.Score, Extracted: r.Extracted, Reason: r.Reason}
	if r.Start >= 0 {
		out.AnswerSpan = []int{r.Start, r.End}
	}
	return out
}

func verifyAction(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	flagString(c, "verifier", &cfg.Verifier.Name)
	flagString(c, "pattern", &cfg.Verifier.Pattern)
	if c.IsSet("json") {
		cfg.Verifier.JSON = c.Bool("json")
	}
	if c.IsSet("timeout") {
		cfg.Verifier.TimeoutMS = int(c.Duration("timeout").Milliseconds())
	}
	v, err := verifiers.New(cfg.Verifier.Name, pipeline.VerifierOptions(cfg.Verifier))
	if err != nil {
		return err
	}

	single := c.IsSet("answer") || c.IsSet("completion")
	switch {
	case single && c.IsSet("data"):
		return errors.New("give either --answer and --completion, or --data")
	case single:
		if !c.IsSet("answer") || !c.IsSet("completion") {
			return errors.New("--answer and --completion go together")
		}
		res, err := v.Verify(c.Context, c.String("completion"), c.String("answer"))
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(toVerifyResult(res))
	case c.IsSet("data"):
		n, correct, err := verifyFile(c.Context, v, c.String("data"), c.String("out"), max(c.Int("jobs"), 1))
		if err != nil {
			return err
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "verified %d completions: %d correct (%.1f%%)\n", n, correct, 100*float64(correct)/float64(n))
		}
		return nil
	}
	return errors.New("nothing to verify: give --answer and --completion, or --data")
}

// verifyInput is one line of --data; other fields are ignored.
type verifyInput struct {
	Answer     *string `json:"answer"`
	Completion *string `json:"completion"`
}

// verifyFile verifies every line of in and writes the results, line for
// line, to out (or standard output). Lines are verified in batches, jobs at
// a time, and written in input order.
func verifyFile(ctx context.Context, v verifiers.Verifier, in, out string, jobs int) (n, correct int, err error) {
	f, err := os.Open(in)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	r := dataset.NewReader(f, in)

	var w interface{ Write(any) error }
	if out == "" {
		w = jsonLines{json.NewEncoder(os.Stdout)}
	} else {
		dw, cerr := dataset.Create(out)
		if cerr != nil {
			return 0, 0, cerr
		}
		defer func() { // err is the named result: commit only a complete run
			if err != nil {
				dw.Abort()
			} else {
				err = dw.Commit()
			}
		}()
		w = dw
	}

	type item struct {
		line               int
		answer, completion string
		res                verifiers.Result
		err                error
	}
	batch := make([]item, 0, 64*jobs)
	flush := func() error {
		var wg sync.WaitGroup
		sem := make(chan struct{}, jobs)
		for i := range batch {
			wg.Add(1)
			sem <- struct{}{}
			go func(it *item) {
				defer func() { <-sem; wg.Done() }()
				it.res, it.err = v.Verify(ctx, it.completion, it.answer)
			}(&batch[i])
		}
		wg.Wait()
		for _, it := range batch {
			if it.err != nil {
				return &dataset.LineError{File: in, Line: it.line, Err: it.err}
			}
			if err := w.Write(toVerifyResult(it.res)); err != nil {
				return err
			}
			n++
			if it.res.Correct {
				correct++
			}
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
			return n, correct, err
		}
		if rec.Answer == nil || rec.Completion == nil {
			return n, correct, &dataset.LineError{File: in, Line: r.Line(), Err: errors.New(`want string fields "answer" and "completion"`)}
		}
		batch = append(batch, item{line: r.Line(), answer: *rec.Answer, completion: *rec.Completion})
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, correct, err
			}
		}
	}
	return n, correct, flush()
}

// jsonLines writes records as JSON lines to a stream.
type jsonLines struct{ enc *json.Encoder }

func (j jsonLines) Write(v any) error { return j.enc.Encode(v) }
