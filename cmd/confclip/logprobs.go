package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
)

func init() {
	register(&cli.Command{
		Name:      "logprobs",
		Usage:     "teacher-force completions through a model: per-token log-probs and entropies of given prompt + completion records",
		UsageText: "confclip logprobs --model M --data rollouts.jsonl --out out.jsonl [--adapter A]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "GGUF model `FILE` ([model] path)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "rollout-shaped records `FILE` (JSONL): prompt and text or tokens"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "records with logprobs, entropies and token offsets `FILE` (JSONL, written atomically)"},
			&cli.StringFlag{Name: "adapter", Usage: "LoRA adapter `FILE` (GGUF) ([model] adapter)"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "CPU threads ([model] threads)"},
			&cli.BoolFlag{Name: "skip-bad", Usage: "skip malformed lines, counting them, instead of stopping"},
		},
		Action: logprobsAction,
	})

	newTeacherForce = func(ctx context.Context, cfg pipeline.Config) (func(context.Context, []*dataset.Rollout) error, func(), error) {
		e, closeEngine, err := openEngine(cfg, pipeline.EngineOptions(cfg))
		if err != nil {
			return nil, nil, err
		}
		return e.TeacherForce, closeEngine, nil
	}
}

// forceChunk is how many records one TeacherForce call takes, so that
// progress shows and memory stays bounded on large files.
const forceChunk = 256

func logprobsAction(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	flagString(c, "model", &cfg.Model.Path)
	flagString(c, "adapter", &cfg.Model.Adapter)
	flagInt(c, "threads", &cfg.Model.Threads)
	if cfg.Model.Path == "" {
		return pipeline.ErrNoModel
	}
	in, out := c.String("data"), c.String("out")
	recs, lines, skipped, err := dataset.ReadFile[dataset.Rollout](in, c.Bool("skip-bad"))
	if err != nil {
		return err
	}
	e, closeEngine, err := openEngine(cfg, pipeline.EngineOptions(cfg))
	if err != nil {
		return err
	}
	defer closeEngine()
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	w, err := dataset.Create(out)
	if err != nil {
		return err
	}
	start, tokens := time.Now(), 0
	for lo := 0; lo < len(recs); lo += forceChunk {
		hi := min(lo+forceChunk, len(recs))
		ptrs := make([]*dataset.Rollout, hi-lo)
		for i := range ptrs {
			ptrs[i] = &recs[lo+i]
		}
		if err := e.TeacherForce(ctx, ptrs); err != nil {
			w.Abort()
			var re rollout.RecordError
			if errors.As(err, &re) {
				return fmt.Errorf("%s:%d: id %q: %s", in, lines[lo+re.Index], re.ID, re.Reason)
			}
			return err
		}
		for _, r := range ptrs {
			if r.Schema == "" {
				r.Schema = dataset.SchemaRollout
			}
			tokens += len(r.Tokens)
			if err := w.Write(r); err != nil {
				w.Abort()
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "logprobs: %d/%d records\n", hi, len(recs))
	}
	if err := w.Commit(); err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(c.App.Writer, "%d records (%d completion tokens) teacher-forced into %s in %s: %.1f tokens/s\n",
		len(recs), tokens, out, el.Round(time.Millisecond), float64(tokens)/el.Seconds())
	if len(skipped) > 0 {
		fmt.Fprintf(c.App.Writer, "%d malformed lines skipped (first: %v)\n", len(skipped), skipped[0])
	}
	return nil
}
