package rollout_test

import (
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/testkit/testutil"
)

// tinyPath is the generated test model, written once per test binary.
var tinyPath string

func TestMain(m *testing.M) { testutil.Main(m, &tinyPath) }

func sharedModels(t testing.TB) string { return testutil.SharedModels(t) }

func loadModel(t testing.TB, path string) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func loadStories(t testing.TB) *llama.Model {
	return loadModel(t, filepath.Join(sharedModels(t), "stories260K.gguf"))
}
