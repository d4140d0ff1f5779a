package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tasks"
)

func init() {
	register(&cli.Command{
		Name:  "gen-task",
		Usage: "write the synthetic arithmetic task: train and held-out prompts (math verifier) and a pre-training corpus",
		Description: "Writes DIR/train.jsonl and DIR/eval.jsonl (prompt records) and DIR/corpus.txt\n" +
			"(one prompt+solution a line, long worked solutions and short ones mixed, for\n" +
			"pre-training a small model). The same seed gives the same files.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out-dir", Aliases: []string{"o"}, Required: true, Usage: "output `DIR` (created if needed)"},
			&cli.IntFlag{Name: "n", Value: 2000, Usage: "problems in all"},
			&cli.IntFlag{Name: "held-out", Value: 200, Usage: "problems kept for eval.jsonl"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "generator seed"},
			&cli.IntFlag{Name: "max-operand", Value: tasks.DefaultMaxOperand, Usage: "largest operand of add and sub, largest factor of mul"},
			&cli.IntFlag{Name: "max-word-operand", Value: tasks.DefaultMaxWordOperand, Usage: "largest number in word problems"},
			&cli.IntFlag{Name: "rl", Usage: "problems kept out of the corpus for RL: train.jsonl gets these only, corpus.txt the rest (default 0: train.jsonl is the corpus' problems)"},
			&cli.StringFlag{Name: "ops", Value: "add,sub,mul,word", Usage: "kinds of problem, comma-separated"},
		},
		Action: func(c *cli.Context) error {
			ops, err := tasks.ParseOps(c.String("ops"))
			if err != nil {
				return cli.Exit("gen-task: "+err.Error(), 2)
			}
			opts := tasks.Options{MaxOperand: c.Int("max-operand"), MaxWordOperand: c.Int("max-word-operand"), Ops: ops}
			if err := opts.Validate(); err != nil {
				return cli.Exit("gen-task: "+err.Error(), 2)
			}
			if c.Int("held-out")+c.Int("rl") >= c.Int("n") || c.Int("rl") < 0 {
				return cli.Exit(fmt.Sprintf("gen-task: --held-out %d and --rl %d leave no corpus problems out of --n %d", c.Int("held-out"), c.Int("rl"), c.Int("n")), 2)
			}
			dir := c.String("out-dir")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			ps := tasks.Generate(c.Uint64("seed"), c.Int("n"), opts)
			if len(ps) < c.Int("n") {
				fmt.Fprintf(os.Stderr, "gen-task: only %d distinct problems within these bounds (asked for %d)\n", len(ps), c.Int("n"))
			}
			train, eval := tasks.Split(ps, c.Int("held-out"), c.Uint64("seed"))
			pre := train
			if k := c.Int("rl"); k > 0 {
				// RL prompts the pre-trained model has not seen: its training
				// accuracy then starts where its held-out accuracy does.
				pre, train = train[k:], train[:k]
			}
			paths := map[string]string{"train": filepath.Join(dir, "train.jsonl"), "eval": filepath.Join(dir, "eval.jsonl"), "corpus": filepath.Join(dir, "corpus.txt")}
			if err := tasks.WritePrompts(paths["train"], train); err != nil {
				return err
			}
			if err := tasks.WritePrompts(paths["eval"], eval); err != nil {
				return err
			}
			// The corpus holds neither the held-out problems (so that the
			// held-out accuracy measures problems the model has not seen) nor,
			// with --rl, the RL prompts.
			corpus := tasks.Corpus(pre, c.Uint64("seed"))
			if err := pipeline.WriteFileAtomic(paths["corpus"], func(w io.Writer) error { return tasks.WriteCorpus(w, corpus) }); err != nil {
				return err
			}
			fmt.Printf("%s\t%d prompts\n%s\t%d prompts\n%s\t%d texts\n", paths["train"], len(train), paths["eval"], len(eval), paths["corpus"], len(corpus))
			return nil
		},
	})
}
