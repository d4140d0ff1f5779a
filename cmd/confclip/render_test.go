package main

import (
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/experiments"
	"github.com/confclip/confclip/pipeline"
)

// TestRenderEvalProgress: the held-out evaluation's progress is a live line
// like the other stages', naming the run's step or eval.
func TestRenderEvalProgress(t *testing.T) {
	var b strings.Builder
	r := newRenderer(&b)
	r.event(pipeline.EvalProgress{Step: 2, Steps: 4, Phase: "greedy", Groups: 1, Total: 3, Elapsed: 2 * time.Second})
	if got, want := b.String(), "step 2/4: held-out evaluation: 1/3 prompts (greedy), ETA 4s\n"; got != want {
		t.Fatalf("run: %q, want %q", got, want)
	}
	b.Reset()
	r = newRenderer(&b)
	r.event(pipeline.EvalProgress{Phase: "sampled", Groups: 5, Total: 10, Elapsed: time.Second})
	if got, want := b.String(), "eval: 5/10 prompts (sampled), ETA 1s\n"; got != want {
		t.Fatalf("eval: %q, want %q", got, want)
	}
}

// TestRenderArmRun: an experiment's event for each run (an experiments
// type that is a pipeline.Event through pipeline.EventBase) is a line.
func TestRenderArmRun(t *testing.T) {
	var b strings.Builder
	r := newRenderer(&b)
	r.event(experiments.ArmRun{Start: "pretrain-seed-7", Arm: "binary_grpo", Seed: 2, Dir: "out/b/seed-2"})
	if got, want := b.String(), "== start pretrain-seed-7, binary_grpo, seed 2 -> out/b/seed-2\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}
