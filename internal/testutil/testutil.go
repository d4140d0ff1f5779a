// Package testutil holds what the tests of the model packages share: the
// generated tiny model, written once per test binary, and the folder of real
// GGUF files beside the checkout.
package testutil

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/confclip/confclip/modelgen"
)

// Main writes the tiny test model (modelgen.Tiny) to a temporary folder,
// sets *tiny to its path, runs the tests and exits. With CONFCLIP_DEBUG set,
// llama.cpp's log goes to stderr.
func Main(m *testing.M, tiny *string) {
	if os.Getenv("CONFCLIP_DEBUG") != "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	dir, err := os.MkdirTemp("", "confclip-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*tiny = filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(*tiny, modelgen.Tiny()); err != nil {
		fmt.Fprintln(os.Stderr, "generating the test model:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// SharedDir is ../shared/models beside the checkout (from a package folder).
func SharedDir() string {
	dir, _ := filepath.Abs(filepath.Join("..", "..", "shared", "models"))
	return dir
}

// SharedModels returns SharedDir, or skips the test, saying so, when the
// folder is absent.
func SharedModels(t testing.TB) string {
	dir := SharedDir()
	if _, err := os.Stat(filepath.Join(dir, "stories260K.gguf")); err != nil {
		t.Skipf("NOT RUN: %s is absent; this test needs the shared model files", dir)
	}
	return dir
}
