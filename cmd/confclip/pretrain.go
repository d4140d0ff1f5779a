package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tasks"
	"github.com/confclip/confclip/train"
)

func init() {
	register(&cli.Command{
		Name:  "pretrain",
		Usage: "train a small llama model from scratch on a text corpus (one text a line) with llama.cpp's training code, every weight",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "corpus", Required: true, Usage: "training texts, one a line (for example corpus.txt of gen-task)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "the trained model `FILE`.gguf"},
			&cli.IntFlag{Name: "steps", Value: 2000, Usage: "optimiser steps"},
			&cli.IntFlag{Name: "batch", Value: 16, Usage: "texts per step"},
			&cli.Float64Flag{Name: "lr", Value: 3e-3, Usage: "AdamW learning rate"},
			&cli.IntFlag{Name: "embd", Value: 64, Usage: "embedding size"},
			&cli.IntFlag{Name: "layers", Value: 2, Usage: "blocks"},
			&cli.IntFlag{Name: "heads", Value: 4, Usage: "attention heads"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the initial weights and the data order"},
			&cli.IntFlag{Name: "threads", Usage: "CPU threads (default: all cores)"},
		},
		Action: pretrainCmd,
	})
}

func pretrainCmd(c *cli.Context) error {
	f, err := os.Open(c.String("corpus"))
	if err != nil {
		return err
	}
	corpus, err := tasks.ReadCorpus(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", c.String("corpus"), err)
	}
	spec := modelgen.Tiny()
	spec.Name = "confclip-pretrained"
	spec.Embd, spec.Layers, spec.Heads, spec.HeadsKV = c.Int("embd"), c.Int("layers"), c.Int("heads"), c.Int("heads")
	spec.FF, spec.Ctx, spec.Seed = 4*spec.Embd, 512, c.Uint64("seed")
	start := time.Now()
	steps := c.Int("steps")
	err = pipeline.Pretrain(c.Context, pipeline.PretrainOptions{
		Out: c.String("out"), Spec: spec, Corpus: corpus, Steps: steps, BatchSeqs: c.Int("batch"),
		LR: c.Float64("lr"), Seed: c.Uint64("seed"), Threads: c.Int("threads"),
		Progress: func(step int, st train.StepStats) {
			if step%50 == 0 || step == steps {
				el := time.Since(start)
				eta := time.Duration(float64(el) / float64(step) * float64(steps-step))
				fmt.Fprintf(os.Stderr, "pretrain: step %d/%d, loss %.4f, %.0f tokens/s, ETA %s\n", step, steps, st.Loss, st.TokensPerSec, eta.Round(time.Second))
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Println(c.String("out"))
	return nil
}
