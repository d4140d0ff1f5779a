// Package testutil holds what the tests of the model packages share: the
// generated tiny model, written once per test binary, and the folder of real
// GGUF files beside the checkout.
package testutil

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
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
	CleanArchModels()
	os.Exit(code)
}

// SharedDir is ../shared/models beside the checkout (from a package folder
// at any depth: the checkout is the folder of go.mod).
func SharedDir() string {
	root, err := findRoot()
	if err != nil { // no working directory: a package folder's relative path is what there is
		return filepath.Join("..", "..", "shared", "models")
	}
	return filepath.Join(filepath.Dir(root), "shared", "models")
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

var (
	archMu    sync.Mutex
	archDir   string
	archPaths = map[string]string{}
)

// ArchModel returns the path of the tiny model of an architecture
// (modelgen.TinyArch), written once per test binary to a temporary folder
// that lives as long as the process.
func ArchModel(t testing.TB, arch string) string {
	t.Helper()
	archMu.Lock()
	defer archMu.Unlock()
	if p, ok := archPaths[arch]; ok {
		return p
	}
	if archDir == "" {
		d, err := os.MkdirTemp("", "confclip-arch-")
		if err != nil {
			t.Fatal(err)
		}
		archDir = d
	}
	s, err := modelgen.TinyArch(arch)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(archDir, arch+".gguf")
	if err := modelgen.Write(p, s); err != nil {
		t.Fatalf("generating the %s model: %v", arch, err)
	}
	archPaths[arch] = p
	return p
}

// CleanArchModels removes ArchModel's folder (call after m.Run).
func CleanArchModels() {
	archMu.Lock()
	defer archMu.Unlock()
	if archDir != "" {
		os.RemoveAll(archDir)
	}
}

// TinyModel writes the tiny generated model (modelgen.Tiny) into dir and
// returns its path.
func TinyModel(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(path, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	return path
}

// WriteLines writes the lines, one a line, to dir/name and returns its path.
func WriteLines(t testing.TB, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// SayPrompts writes n prompt records to dir/name: id "name-i", prompt
// "Say i:", answer "x".
func SayPrompts(t testing.TB, dir, name string, n int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	w, err := dataset.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := w.Write(dataset.Prompt{ID: fmt.Sprintf("%s-%d", name, i), Prompt: fmt.Sprintf("Say %d:", i), Answer: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return path
}

// RealModel returns the path of a real pre-trained model that `make
// real-models` links into build/models (name without .gguf:
// smollm2-135m-instruct, gemma3-270m), or skips the test, saying so, when
// it is absent.
func RealModel(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "build", "models", name+".gguf")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("NOT RUN: %s is absent; `make real-models` fetches it", path)
	}
	return path
}

// PEFTPython returns the interpreter of the virtual environment that `make
// peft-venv` makes (build/peft-venv: torch, transformers and peft, for the
// PEFT interop checks) and the path of a script under scripts/, or skips
// the test, saying so, when the environment is absent.
func PEFTPython(t testing.TB, script string) (python, path string) {
	t.Helper()
	root := repoRoot(t)
	python = filepath.Join(root, "build", "peft-venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Skipf("NOT RUN: %s is absent; `make peft-venv` makes it", python)
	}
	return python, filepath.Join(root, "scripts", script)
}

// repoRoot is the folder of the module's go.mod, above the test's.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// findRoot is the folder of the module's go.mod, the working directory's
// or one above it.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	for err == nil {
		if _, e := os.Stat(filepath.Join(dir, "go.mod")); e == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("no go.mod above the test's folder (%v)", err)
}

// RewriteMarked replaces what lies between the file's "<!-- NAME -->" and
// "<!-- end NAME -->" lines with text, the whole file written anew (the
// benchmarks and make bench-trl write their tables into docs/speed.md).
func RewriteMarked(path, name, text string) error {
	begin, end := "<!-- "+name+" -->\n", "<!-- end "+name+" -->"
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(raw)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i+len(begin) {
		return fmt.Errorf("%s: no %q ... %q markers", path, strings.TrimSpace(begin), end)
	}
	return atomicfile.WriteBytes(path, []byte(s[:i+len(begin)]+text+s[j:]))
}

// RunFixture writes the tiny generated model, prompts for a task that a
// random model solves about half the time (the format verifier accepts a
// completion that starts with a letter from a to m, so that groups have
// reward spread and the adapter really trains) and a short run's settings
// as a config file, and returns the file's path: pipeline's tests and those
// of the packages built on it (through pipelinetest) load the same fixture
// with pipeline.LoadConfig, since pipeline's cannot import a package that
// imports pipeline.
func RunFixture(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	model := TinyModel(t, dir)
	train, eval := SayPrompts(t, dir, "train.jsonl", 6), SayPrompts(t, dir, "eval.jsonl", 3)
	return WriteLines(t, dir, "run.toml",
		"[model]", fmt.Sprintf("path = %q", model), "ctx = 128",
		"[data]", fmt.Sprintf("train = %q", train), fmt.Sprintf("eval = %q", eval),
		"[verifier]", `name = "format"`, `pattern = '^\s*[a-m]'`,
		"[rollout]", "group = 4", "max_tokens = 6",
		"[train]", "lr = 2e-2", "micro_batch = 256", "lora_rank = 4",
		"[run]", "steps = 4", "prompts_per_step = 3", "eval_every = 2", fmt.Sprintf("out = %q", filepath.Join(dir, "run")))
}

// StageFixture writes the tiny generated model, a prompt file of the given
// JSONL lines and a config file for them (groups of 3, 5 tokens, the format
// verifier accepting every completion), and returns the config file's path
// and the prompt file's: the stage tests' fixture, which pipeline's own
// tests and pipelinetest.Fixture load alike (as RunFixture's).
func StageFixture(t testing.TB, lines ...string) (config, data string) {
	t.Helper()
	dir := t.TempDir()
	data = WriteLines(t, dir, "prompts.jsonl", lines...)
	model := TinyModel(t, dir)
	config = WriteLines(t, dir, "stage.toml",
		"[model]", fmt.Sprintf("path = %q", model), "ctx = 128",
		"[verifier]", `name = "format"`, `pattern = '(?s).*'`,
		"[rollout]", "group = 3", "max_tokens = 5")
	return config, data
}
