// Command gorun drives confclip from Go, with the library the command line
// is built on: it writes the synthetic arithmetic task, evaluates a model on
// the held-out prompts, runs a few steps of the RL loop (printing the
// loop's typed progress events), then evaluates the trained adapter.
//
//	go run ./examples/gorun                 # on a generated tiny model
//	go run ./examples/gorun -model M.gguf   # on your own
//
// (Build with `make` first: the llama.cpp libraries must be in build/lib.)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tools"
)

func main() {
	model := flag.String("model", "", "GGUF model (default: a generated tiny one)")
	out := flag.String("out", "", "working folder (default: a new temporary one)")
	steps := flag.Int("steps", 2, "training steps")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *model, *out, *steps); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, model, dir string, steps int) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "confclip-gorun-"); err != nil {
			return err
		}
	}
	if model == "" {
		model = filepath.Join(dir, "tiny.gguf")
		if err := tools.GenModel(tools.GenModelOptions{Out: model, Size: "tiny", Seed: 1}); err != nil {
			return err
		}
	}
	task, err := tools.GenTask(tools.GenTaskOptions{Dir: filepath.Join(dir, "task"), N: 80, HeldOut: 8, Seed: 1, Ops: "add",
		MaxOperand: tools.DefaultMaxOperand, MaxWordOperand: tools.DefaultMaxWordOperand})
	if err != nil {
		return err
	}

	cfg := pipeline.DefaultConfig()
	cfg.Model.Path, cfg.Model.Ctx = model, 256
	cfg.Data.Train, cfg.Data.Eval = task.Train, task.Eval
	cfg.Rollout.Group, cfg.Rollout.MaxTokens, cfg.Rollout.Stop = 4, 16, []string{"\n"}
	cfg.Run.Steps, cfg.Run.PromptsPerStep, cfg.Run.EvalEvery = steps, 4, steps
	cfg.Run.Out = filepath.Join(dir, "run")
	if err := cfg.Validate(); err != nil {
		return err
	}

	// One handle opens the model (and adapter) for every stage.
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		return err
	}
	before, err := pipeline.Evaluate(ctx, m, pipeline.EvalOptions{Config: cfg, Data: cfg.Data.Eval})
	m.Close()
	if err != nil {
		return err
	}
	fmt.Printf("before: accuracy %.3f on %d held-out prompts\n", before.Accuracy, before.Prompts)

	res, err := pipeline.Run(ctx, pipeline.RunOptions{Config: cfg, Progress: func(e pipeline.Event) {
		switch e := e.(type) {
		case pipeline.RunStage:
			fmt.Printf("step %d/%d: %s\n", e.Step, e.Steps, e.Stage)
		case pipeline.RunStepDone:
			fmt.Printf("step %d/%d done: accuracy %.3f, reward %.3f, loss %.4g\n", e.Metrics.Step, e.Steps, e.Metrics.Accuracy, e.Metrics.MeanReward, e.Metrics.Loss)
		}
	}})
	if err != nil {
		return err
	}

	// The trained adapter, through the same kind of handle.
	cfg.Model.Adapter = filepath.Join(res.Dir, fmt.Sprintf("checkpoints/step-%04d/adapter.gguf", steps))
	m, err = pipeline.OpenModel(cfg.Model)
	if err != nil {
		return err
	}
	defer m.Close()
	after, err := pipeline.Evaluate(ctx, m, pipeline.EvalOptions{Config: cfg, Data: cfg.Data.Eval})
	if err != nil {
		return err
	}
	fmt.Printf("after %d steps: accuracy %.3f; run folder %s\n", steps, after.Accuracy, res.Dir)
	return nil
}
