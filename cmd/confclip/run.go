package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/experiments"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
)

func init() {
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "run",
			Usage:     "the main job: rollout, score, export and train, looped, with evaluation, metrics, plots and checkpoints",
			ArgsUsage: "CONFIG.toml",
			// Every stage's flags: a flag given wins over the file.
			Flags: join([]cli.Flag{
				&cli.BoolFlag{Name: "resume", Usage: "continue the run in [run] out from its last checkpoint (with more --steps, extend a finished run)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "run `DIR` (overrides [run] out)"},
				&cli.IntFlag{Name: "steps", Value: defaults.Run.Steps, Usage: "training steps (overrides [run] steps)"},
				&cli.StringSliceFlag{Name: "endpoint", Usage: "sample on the rollout worker at `URL` (confclip serve, or any OpenAI-compatible server; repeat for more; overrides [rollout] endpoints)"},
			}, stageFlags()),
			Action: runCmd,
		}
	})
	register(func() *cli.Command {
		return &cli.Command{
			Name:      "experiment",
			Usage:     "run several arms (binary GRPO, ConfClip GRPO, ...) times several seeds from the same start and compare them",
			ArgsUsage: "CONFIG.toml",
			Flags: join([]cli.Flag{
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "experiment `DIR` (overrides [run] out)"},
				&cli.IntFlag{Name: "steps", Value: defaults.Run.Steps, Usage: "training steps per run (overrides [run] steps)"},
			}, stageFlags()),
			Action: experimentCmd,
		}
	})
}

// stageFlags are the flags of every stage a run loops over.
func stageFlags() []cli.Flag {
	return join(modelFlags(), samplingFlags(), verifierFlags(), rewardFlags(), trainFlags())
}

// runConfig reads CONFIG.toml (the argument, or --config) and the overrides.
func runConfig(c *cli.Command) (experiments.File, error) {
	path := c.String("config")
	switch {
	case c.NArg() == 1:
		path = c.Args().First()
	case c.NArg() > 1 || path == "":
		return experiments.File{}, cli.Exit(c.Name+": give one CONFIG.toml (as the argument or with --config)", 2)
	}
	cfg, err := loadFile(c, path)
	if err != nil {
		return cfg, err
	}
	if c.IsSet("out") {
		cfg.Run.Out = c.String("out")
	}
	if c.IsSet("steps") {
		cfg.Run.Steps = c.Int("steps")
	}
	if c.IsSet("endpoint") {
		cfg.Rollout.Endpoints = c.StringSlice("endpoint")
	}
	return cfg, nil
}

func runCmd(ctx context.Context, c *cli.Command) error {
	f, err := runConfig(c)
	if err != nil {
		return err
	}
	cfg := f.Config
	r := newRenderer(c.Root().ErrWriter)
	ro := pipeline.RunOptions{Config: cfg, Resume: c.Bool("resume"), Progress: r.event, Plot: reporting.RunPlots}
	if len(cfg.Rollout.Endpoints) > 0 {
		ro.Remote = workerPool(cfg.Rollout.Endpoints)
	}
	res, err := pipeline.Run(ctx, ro)
	r.end()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("interrupted; the last checkpoint is in %s: continue with --resume", cfg.Run.Out)
	}
	if err != nil {
		return err
	}
	w := c.Root().Writer
	fmt.Fprintf(w, "run folder: %s\n", res.Dir)
	if res.Before != nil && res.After != nil {
		fmt.Fprintf(w, "held-out accuracy %.3f -> %.3f, mean tokens %.1f -> %.1f\n", res.Before.Accuracy, res.After.Accuracy, res.Before.MeanTokens, res.After.MeanTokens)
	}
	for _, p := range res.Plots {
		fmt.Fprintf(w, "plot: %s\n", p)
	}
	return nil
}

func experimentCmd(ctx context.Context, c *cli.Command) error {
	cfg, err := runConfig(c)
	if err != nil {
		return err
	}
	r := newRenderer(c.Root().ErrWriter)
	res, err := experiments.Experiment(ctx, cfg, r.event)
	r.end()
	if err != nil {
		return err
	}
	w := c.Root().Writer
	fmt.Fprintln(w)
	fmt.Fprint(w, res.Table)
	fmt.Fprintf(w, "\nresults: %s/results.md, %s/results.json\n", res.Dir, res.Dir)
	for _, p := range res.Plots {
		fmt.Fprintf(w, "plot: %s\n", p)
	}
	return nil
}
