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

// Fixture is testutil.StageFixture loaded as a user's config is: the
// tiny generated model and a prompt file of the given JSONL lines, with a
// configuration for them (groups of 3, 5 tokens, the format verifier
// accepting everything), and the prompt file's path.
func Fixture(t *testing.T, lines ...string) (pipeline.Config, string) {
	t.Helper()
	path, data := testutil.StageFixture(t, lines...)
	return load(t, path), data
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
	return load(t, testutil.RunFixture(t))
}

func load(t *testing.T, path string) pipeline.Config {
	t.Helper()
	cfg, err := pipeline.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
