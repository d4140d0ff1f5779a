package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tools"
)

func init() {
	register(genModelCommand)
	register(quantizeCommand)
	register(genTaskCommand)
	register(pretrainCommand)
}

// genModelCommand is confclip gen-model.
func genModelCommand() *cli.Command {
	return &cli.Command{
		Name:  "gen-model",
		Usage: "write a deterministic GGUF model with random weights (for tests and benchmarks): a tiny one, or a real model's layout (--shape)",
		Description: "--shape NAME writes a real model's exact layout (its config's dimensions, head\n" +
			"layout, vocabulary size, RoPE base and tied embeddings) with random weights, to\n" +
			"measure what a step costs at that size: " + strings.Join(tools.ModelShapes(), ", ") + ".\n" +
			"The vocabulary is synthetic SentencePiece pieces padded to the real size. With\n" +
			"--quantize an F32 copy is written first (4 bytes a parameter) beside --out.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output `FILE`.gguf"},
			&cli.StringFlag{Name: "size", Value: "tiny", Usage: "tiny (about 100K parameters) or bench (about 100M, llama only)"},
			&cli.StringFlag{Name: "shape", Usage: "a real model's layout `NAME`: " + strings.Join(tools.ModelShapes(), ", ")},
			&cli.StringFlag{Name: "arch", Value: "llama", Usage: "architecture: " + strings.Join(tools.ModelArchs(), ", ") + "; or, for rollouts only (training refuses their recurrent layers), " + strings.Join(tools.UntrainedModelArchs(), ", ")},
			&cli.Uint64Flag{Name: "seed", Aliases: []string{"s"}, Value: 1, Usage: "weight RNG seed"},
			&cli.StringFlag{Name: "quantize", Usage: "quantize with llama.cpp's quantizer: " + strings.Join(tools.QuantTypes(), ", ")},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			err := tools.GenModel(tools.GenModelOptions{Out: c.String("out"), Size: c.String("size"), Arch: c.String("arch"), Shape: c.String("shape"), Seed: c.Uint64("seed"), Quantize: c.String("quantize")})
			if err != nil {
				return err
			}
			fmt.Fprintln(c.Root().Writer, c.String("out"))
			return nil
		},
	}
}

// quantizeCommand is confclip quantize.
func quantizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "quantize",
		Usage:     "write a copy of a GGUF model in another quantization type with llama.cpp's quantizer (for a base training cannot take)",
		ArgsUsage: "--type TYPE IN.gguf OUT.gguf",
		Description: "A quantized input is dequantized and quantized again, so the copy carries both\n" +
			"types' rounding: start from an F32, F16 or BF16 file where there is one. Matrices\n" +
			"whose rows do not fit the type's blocks keep llama.cpp's fallback type.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Required: true, Usage: "quantization `TYPE`: " + strings.Join(tools.QuantTypes(), ", ")},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "threads, 0 = every core"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() != 2 {
				return cli.Exit("quantize: give IN.gguf and OUT.gguf", 2)
			}
			in, out := c.Args().Get(0), c.Args().Get(1)
			if in == out {
				return cli.Exit("quantize: IN and OUT are the same file", 2)
			}
			if err := tools.Quantize(in, out, c.String("type"), c.Int("threads")); err != nil {
				return err
			}
			fmt.Fprintln(c.Root().Writer, out)
			return nil
		},
	}
}

// genTaskCommand is confclip gen-task.
func genTaskCommand() *cli.Command {
	return &cli.Command{
		Name:  "gen-task",
		Usage: "write the synthetic arithmetic task: train and held-out prompts (math verifier) and a pre-training corpus",
		Description: "Writes DIR/train.jsonl and DIR/eval.jsonl (prompt records) and DIR/corpus.txt\n" +
			"(one prompt+solution a line, long worked solutions and short ones mixed, for\n" +
			"pre-training a small model). The same seed gives the same files.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out-dir", Aliases: []string{"o"}, Required: true, Usage: "output `DIR` (created if needed)"},
			&cli.IntFlag{Name: "n", Value: 2000, Usage: "problems in all"},
			&cli.IntFlag{Name: "held-out", Value: 200, Usage: "problems kept for eval.jsonl"},
			&cli.Uint64Flag{Name: "seed", Aliases: []string{"s"}, Value: 1, Usage: "generator seed"},
			&cli.IntFlag{Name: "max-operand", Value: tools.DefaultMaxOperand, Usage: "largest operand of add and sub, largest factor of mul"},
			&cli.IntFlag{Name: "max-word-operand", Value: tools.DefaultMaxWordOperand, Usage: "largest number in word problems"},
			&cli.IntFlag{Name: "rl", Usage: "problems kept out of the corpus for RL: train.jsonl gets these only, corpus.txt the rest (0: train.jsonl is the corpus' problems)"},
			&cli.StringFlag{Name: "ops", Value: "add,sub,mul,word", Usage: "kinds of problem, comma-separated"},
			&cli.StringFlag{Name: "system", Usage: "write train.jsonl and eval.jsonl as chats for an instruct model: this system message `TEXT`, then the question as the user's"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			res, err := tools.GenTask(tools.GenTaskOptions{
				Dir: c.String("out-dir"), N: c.Int("n"), HeldOut: c.Int("held-out"), RL: c.Int("rl"), Seed: c.Uint64("seed"),
				MaxOperand: c.Int("max-operand"), MaxWordOperand: c.Int("max-word-operand"), Ops: c.String("ops"), System: c.String("system"),
			})
			if err != nil {
				return cli.Exit("gen-task: "+err.Error(), 2)
			}
			if res.N < c.Int("n") {
				fmt.Fprintf(os.Stderr, "gen-task: only %s within these bounds (asked for %d)\n", english.Count(res.N, "distinct problem"), c.Int("n"))
			}
			fmt.Fprintf(c.Root().Writer, "%s\t%s\n%s\t%s\n%s\t%s\n", res.Train, english.Count(res.TrainN, "prompt"), res.Eval, english.Count(res.EvalN, "prompt"), res.Corpus, english.Count(res.CorpusN, "text"))
			return nil
		},
	}
}

// pretrainCommand is confclip pretrain.
func pretrainCommand() *cli.Command {
	return &cli.Command{
		Name:  "pretrain",
		Usage: "train a small llama model from scratch on a text corpus (one text a line) with llama.cpp's training code, every weight",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "corpus", Required: true, Usage: "training texts `FILE`, one a line (for example corpus.txt of gen-task)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "the trained model `FILE`.gguf"},
			&cli.IntFlag{Name: "steps", Value: 2000, Usage: "optimiser steps"},
			&cli.IntFlag{Name: "batch", Value: 16, Usage: "texts per step"},
			&cli.FloatFlag{Name: "lr", Value: 3e-3, Usage: "AdamW learning rate"},
			&cli.IntFlag{Name: "embd", Value: 64, Usage: "embedding size"},
			&cli.IntFlag{Name: "layers", Value: 2, Usage: "blocks"},
			&cli.IntFlag{Name: "heads", Value: 4, Usage: "attention heads"},
			&cli.Uint64Flag{Name: "seed", Aliases: []string{"s"}, Value: 1, Usage: "seed of the initial weights and the data order"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "CPU threads, 0 = every core"},
		},
		Action: pretrainCmd,
	}
}

func pretrainCmd(ctx context.Context, c *cli.Command) error {
	corpus, err := tools.ReadCorpus(c.String("corpus"))
	if err != nil {
		return err
	}
	steps := c.Int("steps")
	r := newRenderer(os.Stderr)
	every := 0
	err = tools.Pretrain(ctx, tools.PretrainOptions{
		Out: c.String("out"), Spec: tools.PretrainSpec(c.Int("embd"), c.Int("layers"), c.Int("heads"), c.Uint64("seed")),
		Corpus: corpus, Steps: steps, BatchSeqs: c.Int("batch"), LR: c.Float("lr"), Seed: c.Uint64("seed"), Threads: c.Int("threads"),
		Progress: pipeline.TrainEvents(steps, func(e pipeline.Event) {
			// A line every 50 steps: pre-training takes thousands.
			if every++; every%50 == 0 || every == steps {
				r.event(e)
			}
		}),
	})
	r.end()
	if err != nil {
		return err
	}
	fmt.Fprintln(c.Root().Writer, c.String("out"))
	return nil
}
