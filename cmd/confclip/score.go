package main

import (
	"context"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "score",
			Usage:     "verify rollouts and compute confidence, reward and advantage (batch reward scoring; a model only for records without log-probs)",
			UsageText: "confclip score --data rollouts.jsonl --out scored.jsonl [--verifier math] [--reward confclip|binary] [--summary summary.json]",
			Flags: join([]cli.Flag{
				&cli.StringFlag{Name: "data", Required: true, Usage: "rollout records `FILE` (JSONL), or an OpenAI-compatible server's completions or chat-completions responses, one a line"},
				&cli.StringFlag{Name: "prompts", Usage: "prompt `FILE` (any shape) that OpenAI responses without a prompt id or answer take them from (by custom_id, else in order)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "scored records `FILE` (JSONL), written atomically"},
				&cli.StringFlag{Name: "summary", Usage: "write the summary as JSON to `FILE`"},
				&cli.BoolFlag{Name: "skip-bad", Usage: "skip bad lines, records and groups, counting them, instead of stopping"},
			}, verifierFlags(), rewardFlags(), modelFlags(), dataFlags(), shardFlags()),
			Action: scoreCmd,
		}
	})
}

func scoreCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	opts := pipeline.NewScoreOptions(cfg, c.String("data"), c.String("out"))
	opts.SkipBad = c.Bool("skip-bad")
	if opts.Shard, err = shardOf(c); err != nil {
		return err
	}
	opts.Prompts, opts.PromptMap = c.String("prompts"), cfg.Data.Map
	if cfg.Model.Path != "" {
		// Records without log-probs are teacher-forced through the model.
		m, err := pipeline.OpenModel(cfg.Model)
		if err != nil {
			return err
		}
		defer m.Close()
		opts.Model = m
	}
	sum, err := pipeline.Score(ctx, opts)
	if err != nil {
		return err
	}
	if err := reporting.ScoreTable(c.Root().Writer, sum); err != nil {
		return err
	}
	if path := c.String("summary"); path != "" {
		return atomicfile.WriteJSON(path, sum)
	}
	return nil
}
