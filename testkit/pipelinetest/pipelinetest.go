// Package pipelinetest holds the fixtures of the tests of the packages built
// on pipeline (experiments, merge): the tiny generated model with a
// prompt file, and a short run's configuration (testutil.RunFixture, which
// pipeline's own tests load too).
package pipelinetest

import (
	"testing"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/testkit/testutil"
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

// RunFixture is testutil.RunFixture's run (the fixture pipeline's own
// tests load too), loaded as a user's config is.
func RunFixture(t *testing.T) pipeline.Config {
	t.Helper()
	cfg, err := pipeline.LoadConfig(testutil.RunFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
