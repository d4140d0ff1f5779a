package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
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
	prompts, _, _, err := dataset.ReadFile[dataset.Prompt](c.String("data"), false)
	if err != nil {
		return err
	}
	if len(prompts) == 0 {
		return fmt.Errorf("%s: no prompts", c.String("data"))
	}
	out := c.String("out")
	if out == "" {
		if out, err = os.MkdirTemp("", "confclip-eval-"); err != nil {
			return err
		}
		defer os.RemoveAll(out)
	}
	m, err := llama.LoadModel(cfg.Model.Path, llama.ModelParams{GPULayers: cfg.Model.GPULayers})
	if err != nil {
		return err
	}
	defer m.Close()
	var a *llama.Adapter
	if cfg.Model.Adapter != "" {
		if a, err = llama.LoadAdapter(m, cfg.Model.Adapter); err != nil {
			return err
		}
		defer a.Close()
	}
	open := func(o rollout.Options) (*rollout.Engine, error) {
		e, err := rollout.NewEngine(m, o)
		if err == nil && a != nil {
			if err = e.SetAdapter(a, 1); err != nil {
				e.Close()
			}
		}
		return e, err
	}
	greedy, err := open(pipeline.GreedyOptions(cfg))
	if err != nil {
		return err
	}
	defer greedy.Close()
	var sampled *rollout.Engine
	if k := c.Int("samples"); k > 1 {
		o := pipeline.EngineOptions(cfg)
		o.Group = k
		if sampled, err = open(o); err != nil {
			return err
		}
		defer sampled.Close()
	}
	res, err := pipeline.Evaluate(c.Context, cfg, greedy, sampled, prompts, out)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Printf("prompts      %d (%d could not be generated)\n", res.Prompts, res.Errors)
		fmt.Printf("accuracy     %.4f (greedy)\n", res.Accuracy)
		if res.Samples > 1 {
			fmt.Printf("pass@%d       %.4f (sampled accuracy %.4f)\n", res.Samples, res.PassAtK, res.SampledAccuracy)
		}
		fmt.Printf("mean tokens  %.1f\n", res.MeanTokens)
		fmt.Printf("calibration  ECE %.4f, Brier %.4f, AUROC %.4f\n", res.ECE, res.Brier, res.AUROC)
	}
	if x := c.Float64("fail-under"); x >= 0 && res.Accuracy < x {
		return cli.Exit(fmt.Sprintf("eval: accuracy %.4f is below --fail-under %.4f", res.Accuracy, x), 3)
	}
	return nil
}
