package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/teacherforce"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "logprobs",
			Usage:     "teacher-force completions through a model: per-token log-probs and entropies of given prompt + completion records",
			UsageText: "confclip logprobs -m M.gguf --data rollouts.jsonl --out out.jsonl [--lora A.gguf]",
			Flags: join(modelFlags(), []cli.Flag{
				&cli.StringFlag{Name: "data", Required: true, Usage: "rollout-shaped records `FILE` (JSONL): prompt and text or tokens"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "records with logprobs, entropies and token offsets `FILE` (JSONL, written atomically)"},
				&cli.BoolFlag{Name: "skip-bad", Usage: "skip malformed lines, counting them, instead of stopping"},
			}, shardFlags()),
			Action: logprobsCmd,
		}
	})
}

func logprobsCmd(ctx context.Context, c *cli.Command) error {
	shard, err := shardOf(c)
	if err != nil {
		return err
	}
	cfg, m, err := openModel(c)
	if err != nil {
		return err
	}
	defer m.Close()
	r := newRenderer(os.Stderr)
	res, err := teacherforce.File(ctx, m, teacherforce.Options{
		Config: cfg, In: c.String("data"), Out: c.String("out"), SkipBad: c.Bool("skip-bad"), Progress: r.event,
		Shard: shard,
	})
	r.end()
	if err != nil {
		return err
	}
	w := c.Root().Writer
	fmt.Fprintf(w, "%s (%s) teacher-forced into %s in %s: %.1f tokens/s\n",
		english.Count(res.Records, "record"), english.Count(res.Tokens, "completion token"), res.Out, res.Elapsed.Round(time.Millisecond), float64(res.Tokens)/res.Elapsed.Seconds())
	if len(res.Skipped) > 0 {
		fmt.Fprintf(w, "%s skipped (first: %s)\n", english.Count(len(res.Skipped), "malformed line"), res.Skipped[0])
	}
	return nil
}
