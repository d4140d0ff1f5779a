package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/train"
)

func init() {
	register(&cli.Command{
		Name:  "train",
		Usage: "run a policy-gradient step on a LoRA adapter over an exported training set",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "base GGUF `MODEL` (may be quantized)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "training set from `confclip export` (JSONL or Parquet)"},
			&cli.StringFlag{Name: "adapter-out", Required: true, Usage: "write the trained adapter to `FILE`.gguf"},
			&cli.StringFlag{Name: "adapter-in", Usage: "start from this adapter (default: a new one, B = 0)"},
			&cli.IntFlag{Name: "lora-rank", Usage: "rank of a new adapter (default 8)"},
			&cli.Float64Flag{Name: "lora-alpha", Usage: "alpha of a new adapter (default 16)"},
			&cli.Float64Flag{Name: "lr", Usage: "AdamW learning rate (default 1e-4)"},
			&cli.Float64Flag{Name: "weight-decay", Usage: "AdamW decoupled weight decay (default 0)"},
			&cli.Float64Flag{Name: "grad-clip", Usage: "clip the gradient's global norm (default 1; 0 = off)"},
			&cli.StringFlag{Name: "loss-agg", Usage: "token_mean, seq_mean_token_mean or seq_mean_token_sum_norm"},
			&cli.IntFlag{Name: "micro-batch", Usage: "tokens per forward-backward pass (default 512)"},
			&cli.IntFlag{Name: "max-tokens", Usage: "the rollout's completion limit (seq_mean_token_sum_norm)"},
			&cli.IntFlag{Name: "steps", Value: 1, Usage: "optimiser steps over the data"},
			&cli.IntFlag{Name: "threads", Usage: "CPU threads (default: all cores)"},
			&cli.StringFlag{Name: "summary", Usage: "write a JSON summary to `FILE`"},
			&cli.BoolFlag{Name: "profile", Usage: "print the time and bytes by ggml op (forward and backward) of the steps to stderr"},
		},
		Action: trainCmd,
	})
}

func trainCmd(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	flagString(c, "model", &cfg.Model.Path)
	flagInt(c, "lora-rank", &cfg.Train.LoraRank)
	flagFloat(c, "lora-alpha", &cfg.Train.LoraAlpha)
	flagFloat(c, "lr", &cfg.Train.LR)
	flagFloat(c, "weight-decay", &cfg.Train.WeightDecay)
	flagFloat(c, "grad-clip", &cfg.Train.GradClip)
	flagString(c, "loss-agg", &cfg.Train.LossAgg)
	flagInt(c, "micro-batch", &cfg.Train.MicroBatch)
	flagInt(c, "max-tokens", &cfg.Rollout.MaxTokens)
	flagInt(c, "threads", &cfg.Model.Threads)
	sum, err := pipeline.Train(c.Context, pipeline.TrainOptions{
		Config: cfg, Data: c.String("data"), AdapterIn: c.String("adapter-in"), AdapterOut: c.String("adapter-out"),
		Steps: c.Int("steps"), Profile: profileTo(c),
		Progress: func(step int, st train.StepStats) {
			fmt.Fprintf(os.Stderr, "step %d: loss %.5f, grad norm %.4g%s, %d sequences, %d tokens in %d micro-batches, %.0f tokens/s\n",
				step, st.Loss, st.GradNorm, map[bool]string{true: " (clipped)"}[st.Clipped], st.Sequences, st.AllTokens, st.MicroBatches, st.TokensPerSec)
		},
	})
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Println(string(b))
	if p := c.String("summary"); p != "" {
		return pipeline.WriteFileAtomic(p, func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err })
	}
	return nil
}

// profileTo is where --profile prints: stderr, or nowhere.
func profileTo(c *cli.Context) io.Writer {
	if c.Bool("profile") {
		return os.Stderr
	}
	return nil
}
