package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/internal/jsonnull"
	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(func() *cli.Command {
		mf := modelFlags()
		// Here the adapter is the one training starts from.
		mf[1].(*cli.StringFlag).Aliases = append(mf[1].(*cli.StringFlag).Aliases, "adapter-in")
		mf[1].(*cli.StringFlag).Usage = "start from this LoRA adapter `FILE` (default: a new one, B = 0) ([model] adapter)"
		return &cli.Command{
			Name:      "train",
			Usage:     "run policy-gradient steps on a LoRA adapter over an exported training set",
			UsageText: "confclip train -m M.gguf --data train.jsonl --adapter-out A.gguf [--lora START.gguf] [--lr 1e-4]",
			Flags: join(mf, trainFlags(), []cli.Flag{
				intOpt("max-tokens", []string{"n", "n-predict"}, "the rollout's completion limit, for seq_mean_token_sum_norm ([rollout] max_tokens)", func(c *pipeline.Config) *int { return &c.Rollout.MaxTokens }),
				&cli.StringFlag{Name: "data", Required: true, Usage: "training set `FILE` from confclip export (JSONL or Parquet)"},
				&cli.StringFlag{Name: "adapter-out", Required: true, Usage: "write the trained adapter to `FILE`.gguf"},
				&cli.IntFlag{Name: "steps", Value: 1, Usage: "optimiser steps over the data"},
				&cli.StringFlag{Name: "summary", Usage: "write a JSON summary to `FILE`"},
				&cli.BoolFlag{Name: "profile", Usage: "print the time and bytes by ggml op (forward and backward) of the steps to stderr"},
			}),
			Action: trainCmd,
		}
	})
}

func trainCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	r := newRenderer(os.Stderr)
	sum, err := pipeline.Train(ctx, pipeline.TrainOptions{
		Config: cfg, Data: c.String("data"), AdapterIn: cfg.Model.Adapter, AdapterOut: c.String("adapter-out"),
		Steps: c.Int("steps"), Profile: profileTo(c), Progress: pipeline.TrainEvents(c.Int("steps"), r.event),
		Note: func(s string) { r.event(pipeline.RunNote{Text: s}) },
	})
	r.end()
	if err != nil {
		return err
	}
	b, err := jsonnull.MarshalIndent(sum, "", "  ")
	if err != nil {
		return fmt.Errorf("the training summary as JSON: %w", err)
	}
	fmt.Fprintln(c.Root().Writer, string(b))
	if p := c.String("summary"); p != "" {
		return atomicfile.Write(p, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
	}
	return nil
}

// profileTo is where --profile prints: stderr, or nowhere.
func profileTo(c *cli.Command) io.Writer {
	if c.Bool("profile") {
		return os.Stderr
	}
	return nil
}
