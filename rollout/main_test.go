package rollout_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
)

// tinyPath is the generated test model, written once per test binary.
var tinyPath string

func TestMain(m *testing.M) {
	if os.Getenv("CONFCLIP_DEBUG") != "" { // llama.cpp's log on stderr
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	dir, err := os.MkdirTemp("", "rollout-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tinyPath = filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(tinyPath, modelgen.Tiny()); err != nil {
		fmt.Fprintln(os.Stderr, "generating the test model:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sharedModels is ../shared/models beside the checkout; tests that need it
// skip, saying so, when it is absent.
func sharedModels(t testing.TB) string {
	dir, _ := filepath.Abs(filepath.Join("..", "..", "shared", "models"))
	if _, err := os.Stat(filepath.Join(dir, "stories260K.gguf")); err != nil {
		t.Skipf("NOT RUN: %s is absent; this test needs the shared model files", dir)
	}
	return dir
}

func loadModel(t testing.TB, path string) *llama.Model {
	t.Helper()
	m, err := llama.LoadModel(path, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func loadStories(t testing.TB) *llama.Model {
	return loadModel(t, filepath.Join(sharedModels(t), "stories260K.gguf"))
}
