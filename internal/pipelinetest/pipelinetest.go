// Package pipelinetest holds the fixtures of the tests of the packages built
// on pipeline (experiments, shard/merge): the tiny generated model with a
// prompt file, and a short run's configuration. pipeline's own tests keep
// their copies, since they cannot import a package that imports pipeline.
package pipelinetest

import (
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/internal/testutil"
	"github.com/confclip/confclip/pipeline"
)

// Fixture writes the tiny generated model and a prompt file of the given
// JSONL lines, and returns a configuration for them (groups of 3, 5 tokens,
// the format verifier accepting everything) and the prompt file's path.
func Fixture(t *testing.T, lines ...string) (pipeline.Config, string) {
	t.Helper()
	dir := t.TempDir()
	data := testutil.WriteLines(t, dir, "prompts.jsonl", lines...)
	cfg := pipeline.DefaultConfig()
	cfg.Model.Path = testutil.TinyModel(t, dir)
	cfg.Model.Ctx = 128
	cfg.Rollout.Group = 3
	cfg.Rollout.MaxTokens = 5
	cfg.Verifier.Name = "format"
	cfg.Verifier.Pattern = `(?s).*` // every completion is right
	return cfg, data
}

// Open opens the configuration's model, closed when the test ends.
func Open(t *testing.T, cfg pipeline.Config) *pipeline.Model {
	t.Helper()
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// RunFixture writes the tiny generated model and prompts for a task that a
// random model solves about half the time (the format verifier accepts a
// completion that starts with a letter from a to m), so that groups have
// reward spread and the adapter really trains.
func RunFixture(t *testing.T) pipeline.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := pipeline.DefaultConfig()
	cfg.Model.Path = testutil.TinyModel(t, dir)
	cfg.Model.Ctx = 128
	cfg.Data.Train = testutil.SayPrompts(t, dir, "train.jsonl", 6)
	cfg.Data.Eval = testutil.SayPrompts(t, dir, "eval.jsonl", 3)
	cfg.Verifier.Name = "format"
	cfg.Verifier.Pattern = `^\s*[a-m]`
	cfg.Rollout.Group = 4
	cfg.Rollout.MaxTokens = 6
	cfg.Train.LR = 2e-2
	cfg.Train.MicroBatch = 256
	cfg.Train.LoraRank = 4
	cfg.Run.Steps = 4
	cfg.Run.PromptsPerStep = 3
	cfg.Run.EvalEvery = 2
	cfg.Run.Out = filepath.Join(dir, "run")
	return cfg
}
