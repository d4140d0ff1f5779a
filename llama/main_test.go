package llama_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/modelgen"
)

// tinyPath is the generated test model, written once per test binary.
var tinyPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llama-test-")
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
