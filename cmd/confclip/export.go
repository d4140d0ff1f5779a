package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(&cli.Command{
		Name:      "export",
		Usage:     "turn scored completions into a training set (JSONL or Parquet) for confclip train, TRL or verl",
		UsageText: "confclip export --data scored.jsonl --out train.parquet [--model M] [--adapter A] [--skip-zero-std]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: "scored records `FILE` (JSONL)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "training set `FILE`"},
			&cli.StringFlag{Name: "format", Usage: "jsonl or parquet (default: parquet when --out ends in .parquet, else jsonl)"},
			&cli.StringFlag{Name: "model", Usage: "GGUF `FILE` the rollouts came from; its SHA-256 goes into the provenance ([model] path)"},
			&cli.StringFlag{Name: "adapter", Usage: "LoRA adapter `FILE` the rollouts were sampled with ([model] adapter)"},
			&cli.BoolFlag{Name: "skip-zero-std", Usage: "drop groups whose rewards are all equal ([advantage] skip_zero_std)"},
		},
		Action: runExport,
	})
}

func runExport(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	if c.IsSet("model") {
		cfg.Model.Path = c.String("model")
	}
	if c.IsSet("adapter") {
		cfg.Model.Adapter = c.String("adapter")
	}
	if c.IsSet("skip-zero-std") {
		cfg.Advantage.SkipZeroStd = c.Bool("skip-zero-std")
	}
	configJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	sum, err := pipeline.Export(pipeline.ExportOptions{
		In:          c.String("data"),
		Out:         c.String("out"),
		Format:      c.String("format"),
		Model:       cfg.Model.Path,
		Adapter:     cfg.Model.Adapter,
		ConfigJSON:  configJSON,
		SkipZeroStd: cfg.Advantage.SkipZeroStd,
	})
	if err != nil {
		return err
	}

	w := c.App.Writer
	fmt.Fprintf(w, "wrote %d examples (%d completion tokens) from %d records to %s (%s)\n",
		sum.Examples, sum.Tokens, sum.Records, sum.Out, sum.Format)
	fmt.Fprintf(w, "groups: %d, with zero reward std: %d", sum.Groups, sum.ZeroStdGroups)
	if cfg.Advantage.SkipZeroStd {
		fmt.Fprintf(w, " (dropped, %d records)", sum.Dropped)
	}
	fmt.Fprintln(w)
	if sum.FromModelLogprobs > 0 {
		fmt.Fprintf(w, "old_logprobs: model log-probs for %d teacher-forced records without sampling log-probs\n", sum.FromModelLogprobs)
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
