package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/train"
)

// TrainerConfig maps the [train] table (and the rollout's max tokens, which
// seq_mean_token_sum_norm needs) onto the trainer's settings.
func TrainerConfig(cfg Config) train.Config {
	t := cfg.Train
	return train.Config{LR: t.LR, Beta1: t.Beta1, Beta2: t.Beta2, Eps: t.Eps, WeightDecay: t.WeightDecay,
		GradClip: t.GradClip, LossAgg: t.LossAgg, MaxTokens: cfg.Rollout.MaxTokens,
		MicroBatchTokens: t.MicroBatch, Threads: cfg.Model.Threads}
}

// LoRAConfig maps the [train] table onto a new adapter's settings.
func LoRAConfig(cfg Config) train.LoRAConfig {
	return train.LoRAConfig{Rank: cfg.Train.LoraRank, Alpha: cfg.Train.LoraAlpha, Targets: cfg.Train.Targets, Seed: cfg.Train.Seed}
}

// TrainOptions says what `confclip train` does.
type TrainOptions struct {
	Config     Config
	Data       string // exported training set (JSONL or Parquet)
	AdapterIn  string // start from this adapter ("" = a new one)
	AdapterOut string
	Steps      int // optimiser steps over the data (1 = one on-policy step)
	// Progress, when set, is called after each step.
	Progress func(step int, st train.StepStats)
	// Profile, when set, receives the time and bytes by ggml op, forward
	// and backward, of the steps (llama.WriteProfile's table).
	Profile io.Writer
}

// TrainSummary is what a `confclip train` run did.
type TrainSummary struct {
	Examples   int               `json:"examples"`
	Steps      []train.StepStats `json:"steps"`
	AdapterOut string            `json:"adapter_out"`
	NewAdapter bool              `json:"new_adapter"`
}

// Examples converts exported records into the trainer's examples.
func Examples(recs []dataset.TrainExample) []train.Example {
	exs := make([]train.Example, len(recs))
	for i, r := range recs {
		exs[i] = train.Example{Prompt: r.PromptIDs, Completion: r.CompletionIDs, Advantage: r.Advantage}
	}
	return exs
}

// Train runs policy-gradient steps on a LoRA adapter over an exported
// training set and writes the adapter.
func Train(ctx context.Context, o TrainOptions) (TrainSummary, error) {
	var sum TrainSummary
	cfg := o.Config
	if cfg.Model.Path == "" {
		return sum, ErrNoModel
	}
	if o.AdapterOut == "" {
		return sum, errors.New("no adapter output path given (--adapter-out)")
	}
	if o.Steps <= 0 {
		o.Steps = 1
	}
	recs, err := ReadTrainExamples(o.Data)
	if err != nil {
		return sum, err
	}
	if len(recs) == 0 {
		return sum, fmt.Errorf("%s: no training examples", o.Data)
	}
	sum.Examples = len(recs)
	// NoRepack: a repacked quantized weight has no backward product.
	m, err := llama.LoadModel(cfg.Model.Path, llama.ModelParams{GPULayers: cfg.Model.GPULayers, NoRepack: true})
	if err != nil {
		return sum, err
	}
	defer m.Close()
	in := o.AdapterIn
	if in == "" {
		tmp, err := os.CreateTemp("", "confclip-lora-*.gguf")
		if err != nil {
			return sum, err
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		if err := train.CreateLoRA(m, tmp.Name(), LoRAConfig(cfg)); err != nil {
			return sum, err
		}
		in = tmp.Name()
		sum.NewAdapter = true
	}
	a, err := llama.LoadAdapter(m, in)
	if err != nil {
		return sum, err
	}
	defer a.Close()
	tcfg := TrainerConfig(cfg)
	tcfg.Profile = o.Profile != nil
	tr, err := train.NewLoRATrainer(m, a, tcfg)
	if err != nil {
		return sum, err
	}
	defer tr.Close()
	exs := Examples(recs)
	for i := 0; i < o.Steps; i++ {
		st, err := tr.Step(ctx, exs)
		if err != nil {
			return sum, fmt.Errorf("%s: %w", o.Data, err)
		}
		sum.Steps = append(sum.Steps, st)
		if o.Progress != nil {
			o.Progress(i+1, st)
		}
	}
	if o.Profile != nil {
		if err := llama.WriteProfile(o.Profile, tr.Profile()); err != nil {
			return sum, err
		}
	}
	if err := train.SaveLoRA(a, m.Architecture(), o.AdapterOut); err != nil {
		return sum, err
	}
	sum.AdapterOut = o.AdapterOut
	return sum, nil
}
