package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "eval",
			Usage:     "measure a model's (and adapter's) accuracy on prompts with reference answers; --fail-under and --junit make it a CI check",
			UsageText: "confclip eval -m M.gguf --data prompts.jsonl [--fail-under 0.8] [--junit report.xml] [--json]",
			Description: "Each prompt gets one greedy completion (temperature 0), verified against its answer. A prompt\n" +
				"that cannot be generated counts as wrong and is listed. Exit status 3 when the accuracy is\n" +
				"below --fail-under.",
			Flags: join(modelFlags(), samplingFlags(), verifierFlags(), []cli.Flag{
				&cli.StringFlag{Name: "data", Required: true, Usage: "prompts with answers `FILE` (JSONL)"},
				&cli.IntFlag{Name: "samples", Value: 1, Usage: "K: also sample K completions per prompt (with the sampling flags) and report pass@K"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "keep the generated and scored records in `DIR` (default: a temporary folder)"},
				&cli.FloatFlag{Name: "fail-under", Usage: "exit with status 3 when the greedy accuracy is below `X`, a fraction in 0..1"},
				&cli.StringFlag{Name: "junit", Usage: "write a JUnit XML report, one test case per prompt, to `FILE`"},
				&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			}, shardFlags()),
			Action: evalCmd,
		}
	})
}

func evalCmd(ctx context.Context, c *cli.Command) error {
	failUnder := c.Float("fail-under")
	if c.IsSet("fail-under") && !(failUnder >= 0 && failUnder <= 1) {
		return cli.Exit(fmt.Sprintf("eval: --fail-under %g: want a fraction in 0..1 (0.8 for 80%%)", failUnder), 2)
	}
	cfg, m, err := openModel(c)
	if err != nil {
		return err
	}
	defer m.Close()
	shard, err := shardOf(c)
	if err != nil {
		return err
	}
	r := newRenderer(c.Root().ErrWriter)
	res, err := pipeline.Evaluate(ctx, m, pipeline.EvalOptions{Config: cfg, Data: c.String("data"), Samples: c.Int("samples"), Dir: c.String("out"), Shard: shard, Progress: r.event})
	r.clear()
	if err != nil {
		return err
	}
	if p := c.String("junit"); p != "" {
		if err := atomicfile.Write(p, func(w io.Writer) error { return reporting.WriteJUnit(w, res) }); err != nil {
			return err
		}
	}
	w := c.Root().Writer
	if c.Bool("json") {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(w, string(b))
	} else {
		fmt.Fprintf(w, "prompts      %d (%d could not be generated: counted wrong)\n", res.Prompts, res.Failed)
		fmt.Fprintf(w, "accuracy     %.4f (greedy, %d/%d)\n", res.Accuracy, res.Correct, res.Prompts)
		if res.Samples > 1 {
			fmt.Fprintf(w, "pass@%d       %s (sampled accuracy %s)\n", res.Samples, orUndefined(res.PassAtK), orUndefined(res.SampledAccuracy))
		}
		fmt.Fprintf(w, "mean tokens  %.1f\n", res.MeanTokens)
		fmt.Fprintf(w, "calibration  ECE %s, Brier %s, AUROC %s\n", orUndefined(res.ECE), orUndefined(res.Brier), orUndefined(res.AUROC))
		for _, cs := range res.Cases {
			if cs.Error != "" {
				fmt.Fprintf(w, "not generated: %s:%d: id %q: %s\n", res.Data, cs.Line, cs.ID, cs.Error)
			}
		}
	}
	// A shard with no prompts has no accuracy to hold against the bar.
	if c.IsSet("fail-under") && res.Prompts > 0 && res.Accuracy < failUnder {
		return cli.Exit(fmt.Sprintf("eval: accuracy %.4f is below --fail-under %.4f", res.Accuracy, failUnder), 3)
	}
	return nil
}

// orUndefined prints a metric that may be undefined (nil).
func orUndefined(x *float64) string {
	if x == nil {
		return "undefined"
	}
	return fmt.Sprintf("%.4f", *x)
}
