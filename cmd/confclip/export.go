package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(func() *cli.Command {
		skip := boolOpt("skip-zero-std", "drop groups whose rewards are all equal ([advantage] skip_zero_std)", func(c *pipeline.Config) *bool { return &c.Advantage.SkipZeroStd })
		return &cli.Command{
			Name:      "export",
			Usage:     "turn scored completions into a training set (JSONL or Parquet) for confclip train, TRL or verl",
			UsageText: "confclip export --data scored.jsonl --out train.parquet [-m M.gguf] [--lora A.gguf] [--skip-zero-std]",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "data", Required: true, Usage: "scored records `FILE` (JSONL)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "training set `FILE`"},
				&cli.StringFlag{Name: "format", Usage: "jsonl or parquet (default: parquet when --out ends in .parquet, else jsonl), and/or the columns: confclip (default), trl or verl, e.g. verl,parquet (docs/export.md)"},
				stringOpt("model", []string{"m"}, "GGUF model `FILE` the rollouts came from; its SHA-256 goes into the provenance ([model] path)", func(c *pipeline.Config) *string { return &c.Model.Path }),
				stringOpt("adapter", []string{"lora"}, "LoRA adapter `FILE` the rollouts were sampled with ([model] adapter)", func(c *pipeline.Config) *string { return &c.Model.Adapter }),
				skip,
			},
			Action: exportCmd,
		}
	})
}

func exportCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	eo, err := pipeline.NewExportOptions(cfg, c.String("data"), c.String("out"))
	if err != nil {
		return err
	}
	if eo.Format, eo.Layout, err = exportFormat(c.String("format")); err != nil {
		return err
	}
	sum, err := pipeline.Export(eo)
	if err != nil {
		return err
	}
	w := c.Root().Writer
	fmt.Fprintf(w, "wrote %s (%s) from %s to %s (%s)\n",
		english.Count(sum.Examples, "example"), english.Count(sum.Tokens, "completion token"), english.Count(sum.Records, "record"), sum.Out, sum.Format+", "+sum.Layout+" columns")
	fmt.Fprintf(w, "groups: %d, with zero reward std: %d", sum.Groups, sum.ZeroStdGroups)
	if cfg.Advantage.SkipZeroStd {
		fmt.Fprintf(w, " (dropped, %s)", english.Count(sum.Dropped, "record"))
	}
	fmt.Fprintln(w)
	if sum.FromModelLogprobs > 0 {
		fmt.Fprintf(w, "old_logprobs: model log-probs for %s without sampling log-probs\n", english.Count(sum.FromModelLogprobs, "teacher-forced record"))
	}
	orNone := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	p := sum.Provenance
	fmt.Fprintf(w, "provenance: model sha256 %s, adapter %s, config %s\n", orNone(p.ModelSHA256), orNone(p.Adapter), p.ConfigHash)
	return nil
}
