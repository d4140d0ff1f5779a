package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "rollout",
			Usage:     "sample G completions per prompt with their log-probs (resumable)",
			UsageText: "confclip rollout -m M.gguf --data prompts.jsonl --out rollouts.jsonl [-G 8] [-n 256] [--temp 1] [--stop S]...",
			Flags: join(modelFlags(), samplingFlags(), dataFlags(), []cli.Flag{
				&cli.StringFlag{Name: "data", Required: true, Usage: "prompt `FILE`, JSONL or Parquet, in any shape formats.md lists (confclip, TRL, verl, GSM8K, MATH)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "rollout records `FILE` (JSONL); an existing one made the same way is resumed"},
				&cli.BoolFlag{Name: "restart", Usage: "delete --out and start over instead of resuming it"},
				&cli.BoolFlag{Name: "skip-bad", Usage: "skip malformed lines of --data, counting them, instead of stopping"},
				&cli.BoolFlag{Name: "allow-no-answer", Usage: "sample prompts without a reference answer although the verifier needs one (scoring then refuses them)"},
				&cli.BoolFlag{Name: "no-timing", Usage: "leave timing out of the records (the file then depends only on the inputs and options)"},
			}, shardFlags(), endpointFlags()),
			Action: rolloutCmd,
		}
	})
}

func rolloutCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	shard, err := shardOf(c)
	if err != nil {
		return err
	}
	source, err := endpointOf(ctx, c)
	if err != nil {
		return err
	}
	var m *pipeline.Model
	if source == nil {
		if m, err = pipeline.OpenModel(cfg.Model); err != nil {
			return err
		}
		defer m.Close()
	}
	r := newRenderer(os.Stderr)
	res, err := pipeline.Rollout(ctx, m, pipeline.RolloutOptions{
		Config: cfg, In: c.String("data"), Out: c.String("out"),
		SkipBad: c.Bool("skip-bad"), AllowNoAnswer: c.Bool("allow-no-answer"), NoTiming: c.Bool("no-timing"), Restart: c.Bool("restart"), Progress: r.event,
		Shard: shard, Source: source,
	})
	r.end()
	w := c.Root().Writer
	if res.PromptShape != "" {
		fmt.Fprintf(w, "%s: %s\n", c.String("data"), res.PromptShape)
	}
	if res.AlreadyDone > 0 {
		fmt.Fprintf(w, "resumed %s: %d of %s %s already complete\n", res.Out, res.AlreadyDone, english.Count(res.Prompts, "prompt"), wasWere(res.AlreadyDone))
	}
	if res.Groups > 0 || err == nil {
		fmt.Fprintf(w, "%s (%s, %s) written to %s in %s: %.1f tokens/s; %s decoded\n",
			english.Count(res.Groups, "group"), english.Count(res.Records, "completion"), english.Count(res.Tokens, "token"), res.Out, res.Elapsed.Round(time.Millisecond), res.TokensPerSecond(), english.Count(res.PromptTokens, "prompt token"))
		fmt.Fprintf(w, "%s holds %s, made with %s\n", res.Out, english.Count(res.FileGroups, "complete group"), res.Provenance)
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintf(w, "%s skipped (first: %s)\n", english.Count(len(res.Skipped), "malformed line"), res.Skipped[0])
	}
	if len(res.Failed) > 0 {
		fmt.Fprintf(w, "%s not generated:\n", english.Count(len(res.Failed), "prompt"))
		for _, f := range res.Failed {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return cli.Exit(fmt.Sprintf("interrupted: %s in %s; run the same command again to resume", english.Count(res.FileGroups, "complete group"), res.Out), 130)
	}
	return err
}
