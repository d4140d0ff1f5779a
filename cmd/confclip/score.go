package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
)

// newTeacherForce builds the hook that teacher-forces completions through a
// model, for records that come without log-probs. It stays nil until the
// rollout engine provides it; close releases the model.
var newTeacherForce func(ctx context.Context, cfg pipeline.Config) (hook func(context.Context, []*dataset.Rollout) error, close func(), err error)

func init() {
	register(&cli.Command{
		Name:      "score",
		Usage:     "verify rollouts and compute confidence, reward and advantage (batch reward scoring, no model needed)",
		UsageText: "confclip score --data rollouts.jsonl --out scored.jsonl [--verifier math] [--reward confclip|binary] [--summary summary.json]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: "rollout records `FILE` (JSONL)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "scored records `FILE` (JSONL), written atomically"},
			&cli.StringFlag{Name: "summary", Usage: "write the summary as JSON to `FILE`"},
			&cli.StringFlag{Name: "verifier", Usage: "verifier for records that name none: math, exact, choice, format, command ([verifier] name)"},
			&cli.StringFlag{Name: "reward", Usage: "confclip or binary ([reward] method)"},
			&cli.StringFlag{Name: "weight", Usage: "confclip weight: absolute or relative ([reward] weight)"},
			&cli.Float64Flag{Name: "lambda", Usage: "penalty on wrong answers ([reward] lambda)"},
			&cli.Float64Flag{Name: "lo", Usage: "lower clip of the absolute weight ([reward] lo)"},
			&cli.Float64Flag{Name: "hi", Usage: "upper clip of the absolute weight ([reward] hi)"},
			&cli.Float64Flag{Name: "eps", Usage: "half-width of the relative band ([reward] eps)"},
			&cli.StringFlag{Name: "advantage", Usage: "grpo, dr_grpo, rloo or none ([advantage] estimator)"},
			&cli.StringFlag{Name: "confidence", Usage: "geo_mean, arith_mean, min or neg_entropy ([confidence] estimator)"},
			&cli.StringFlag{Name: "scope", Usage: "completion or answer ([confidence] scope)"},
			&cli.IntFlag{Name: "vocab", Usage: "vocabulary size for neg_entropy ([confidence] vocab)"},
			&cli.StringFlag{Name: "model", Usage: "GGUF `FILE` to teacher-force completions that have no log-probs ([model] path)"},
			&cli.BoolFlag{Name: "skip-bad", Usage: "skip bad lines, records and groups, counting them, instead of stopping"},
		},
		Action: scoreAction,
	})
}

func scoreAction(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	flagString(c, "verifier", &cfg.Verifier.Name)
	flagString(c, "reward", &cfg.Reward.Method)
	flagString(c, "weight", &cfg.Reward.Weight)
	flagFloat(c, "lambda", &cfg.Reward.Lambda)
	flagFloat(c, "lo", &cfg.Reward.Lo)
	flagFloat(c, "hi", &cfg.Reward.Hi)
	flagFloat(c, "eps", &cfg.Reward.Eps)
	flagString(c, "advantage", &cfg.Advantage.Estimator)
	flagString(c, "confidence", &cfg.Confidence.Estimator)
	flagString(c, "scope", &cfg.Confidence.Scope)
	if c.IsSet("vocab") {
		cfg.Confidence.Vocab = c.Int("vocab")
	}
	flagString(c, "model", &cfg.Model.Path)

	opts := pipeline.NewScoreOptions(cfg, c.String("data"), c.String("out"))
	opts.SkipBad = c.Bool("skip-bad")
	switch {
	case newTeacherForce != nil && cfg.Model.Path != "":
		hook, closeModel, err := newTeacherForce(c.Context, cfg)
		if err != nil {
			return err
		}
		defer closeModel()
		opts.TeacherForce = hook
	case c.IsSet("model"):
		return errors.New("teacher forcing with --model is not available in this build yet")
	}

	sum, err := pipeline.Score(c.Context, opts)
	if err != nil {
		return err
	}
	if err := sum.WriteTable(os.Stdout); err != nil {
		return err
	}
	if path := c.String("summary"); path != "" {
		b, err := json.MarshalIndent(sum, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("summary: %w", err)
		}
	}
	return nil
}

// flagString sets *dst from a string flag given on the command line (flags
// win over the config file).
func flagString(c *cli.Context, name string, dst *string) {
	if c.IsSet(name) {
		*dst = c.String(name)
	}
}

// flagFloat sets *dst from a float flag given on the command line.
func flagFloat(c *cli.Context, name string, dst *float64) {
	if c.IsSet(name) {
		*dst = c.Float64(name)
	}
}

// flagInt sets *dst from an int flag given on the command line.
func flagInt(c *cli.Context, name string, dst *int) {
	if c.IsSet(name) {
		*dst = c.Int(name)
	}
}
