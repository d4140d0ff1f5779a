package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/pipeline"
)

func init() {
	register(&cli.Command{
		Name:      "run",
		Usage:     "the main job: rollout, score, export and train, looped, with evaluation, metrics, plots and checkpoints",
		ArgsUsage: "CONFIG.toml",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "resume", Usage: "continue the run in [run] out from its last checkpoint"},
			&cli.StringFlag{Name: "out", Usage: "run folder (overrides [run] out)"},
			&cli.IntFlag{Name: "steps", Usage: "training steps (overrides [run] steps)"},
		},
		Action: runCmd,
	})
	register(&cli.Command{
		Name:      "experiment",
		Usage:     "run several arms (binary GRPO, ConfClip GRPO, ...) times several seeds from the same start and compare them",
		ArgsUsage: "CONFIG.toml",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "experiment folder (overrides [run] out)"},
			&cli.IntFlag{Name: "steps", Usage: "training steps per run (overrides [run] steps)"},
		},
		Action: experimentCmd,
	})
}

// runConfig reads CONFIG.toml (the argument, or --config) and the overrides.
func runConfig(c *cli.Context) (pipeline.Config, error) {
	path := c.String("config")
	if c.NArg() == 1 {
		path = c.Args().First()
	} else if c.NArg() > 1 || path == "" {
		return pipeline.Config{}, cli.Exit(c.Command.Name+": give one CONFIG.toml", 2)
	}
	cfg, err := pipeline.LoadConfig(path)
	if err != nil {
		return cfg, err
	}
	flagString(c, "out", &cfg.Run.Out)
	flagInt(c, "steps", &cfg.Run.Steps)
	return cfg, nil
}

func runCmd(c *cli.Context) error {
	cfg, err := runConfig(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := pipeline.RunOptions{Config: cfg, Resume: c.Bool("resume"), Log: os.Stderr}
	if isTerminal(os.Stderr) {
		// One live line: the stage of the running step, replaced by the
		// step's summary when it ends.
		opts.Live = func(line string) { fmt.Fprintf(os.Stderr, "\r\033[K%s", line) }
		opts.Log = clearLine{os.Stderr}
	}
	res, err := pipeline.Run(ctx, opts)
	if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		return fmt.Errorf("interrupted; the last checkpoint is in %s: continue with --resume", cfg.Run.Out)
	}
	if err != nil {
		return err
	}
	fmt.Printf("run folder: %s\n", res.Dir)
	if res.Before != nil && res.After != nil {
		fmt.Printf("held-out accuracy %.3f -> %.3f, mean tokens %.1f -> %.1f\n", res.Before.Accuracy, res.After.Accuracy, res.Before.MeanTokens, res.After.MeanTokens)
	}
	for _, p := range res.Plots {
		fmt.Printf("plot: %s\n", p)
	}
	return nil
}

func experimentCmd(c *cli.Context) error {
	cfg, err := runConfig(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := pipeline.Experiment(ctx, cfg, os.Stderr)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.Table)
	fmt.Printf("\nresults: %s/results.md, %s/results.json\n", res.Dir, res.Dir)
	for _, p := range res.Plots {
		fmt.Printf("plot: %s\n", p)
	}
	return nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// clearLine clears the live line before each write.
type clearLine struct{ w io.Writer }

func (c clearLine) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, "\r\033[K"); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
