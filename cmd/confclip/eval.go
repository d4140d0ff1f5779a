package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(&cli.Command{
		Name:  "eval",
		Usage: "measure a model's (and adapter's) accuracy on prompts with reference answers; --fail-under makes it a CI check",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "GGUF `MODEL`"},
			&cli.StringFlag{Name: "adapter", Usage: "LoRA adapter (GGUF)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "prompts with answers (JSONL)"},
			&cli.StringFlag{Name: "verifier", Usage: "verifier name (default math)"},
			&cli.IntFlag{Name: "samples", Value: 1, Usage: "K: also sample K completions per prompt and report pass@K"},
			&cli.IntFlag{Name: "max-tokens", Usage: "completion length limit (default 256)"},
			&cli.StringSliceFlag{Name: "stop", Usage: "stop string (repeatable)"},
			&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature for --samples (default 1)"},
			&cli.BoolFlag{Name: "chat", Usage: "render prompts with the model's chat template"},
			&cli.IntFlag{Name: "threads", Usage: "CPU threads (default: all cores)"},
			&cli.StringFlag{Name: "out", Usage: "folder for the generated and scored records (default: a temporary one)"},
			&cli.Float64Flag{Name: "fail-under", Value: -1, Usage: "exit with status 3 when the greedy accuracy is below `X` (0..1)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		},
		Action: evalCmd,
	})
}

func evalCmd(c *cli.Context) error {
	cfg, err := loadConfig(c)
	if err != nil {
		return err
	}
	flagString(c, "model", &cfg.Model.Path)
	flagString(c, "adapter", &cfg.Model.Adapter)
	flagString(c, "verifier", &cfg.Verifier.Name)
	flagInt(c, "max-tokens", &cfg.Rollout.MaxTokens)
	flagFloat(c, "temperature", &cfg.Rollout.Temperature)
	flagInt(c, "threads", &cfg.Model.Threads)
	if c.IsSet("stop") {
		cfg.Rollout.Stop = c.StringSlice("stop")
	}
	if c.IsSet("chat") {
		cfg.Rollout.Chat = c.Bool("chat")
	}
	if cfg.Model.Path == "" {
		return pipeline.ErrNoModel
	}
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		return err
	}
	defer m.Close()
	res, err := pipeline.Evaluate(c.Context, m, pipeline.EvalOptions{Config: cfg, Data: c.String("data"), Samples: c.Int("samples"), Dir: c.String("out")})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Printf("prompts      %d (%d could not be generated)\n", res.Prompts, res.Failed)
		fmt.Printf("accuracy     %.4f (greedy)\n", res.Accuracy)
		if res.Samples > 1 {
			fmt.Printf("pass@%d       %.4f (sampled accuracy %.4f)\n", res.Samples, *res.PassAtK, *res.SampledAccuracy)
		}
		fmt.Printf("mean tokens  %.1f\n", res.MeanTokens)
		fmt.Printf("calibration  ECE %v, Brier %v, AUROC %v\n", res.ECE, res.Brier, res.AUROC)
	}
	if x := c.Float64("fail-under"); x >= 0 && res.Accuracy < x {
		return cli.Exit(fmt.Sprintf("eval: accuracy %.4f is below --fail-under %.4f", res.Accuracy, x), 3)
	}
	return nil
}
