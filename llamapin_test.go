package confclip

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestLlamaCommitMatchesPin ties the llama.cpp commit the binary calls its
// pin (llama.LlamaCommit: confclip version, inspect) to the commit
// scripts/llama-source.sh lays down and checks the pinned archive against
// (LLAMA_COMMIT), so a bump that changes one changes both. The commit the
// libraries are built from (ggml_commit(), written by the script into
// third_party/llama.cpp/version.cmake) is llama's TestLibraryCommitIsPin.
// The files are read as text: the test links no llama.cpp.
func TestLlamaCommitMatchesPin(t *testing.T) {
	pin, pinAt := findIn(t, "scripts/llama-source.sh", `(?m)^LLAMA_COMMIT=([0-9a-f]+)$`)
	if got, at := findIn(t, "llama/llama.go", `(?m)^const LlamaCommit = "([0-9a-f]+)"$`); got != pin {
		t.Errorf("%s: LlamaCommit is %q, but %s pins LLAMA_COMMIT=%s; change them together", at, got, pinAt, pin)
	}
	// The pinned archive's commit is checked by the script; the docs name it.
	if got, at := findIn(t, "docs/llama-bump.md", `(?m)^main builds llama\.cpp ([0-9a-f]+)`); got != pin {
		t.Errorf("%s: docs/llama-bump.md says main builds %s, the pin is %s", at, got, pin)
	}
}

// findIn returns the first group of re's first match in file and where it
// is (file:line); the test fails if there is none.
func findIn(t *testing.T, file, re string) (string, string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(re).FindSubmatchIndex(b)
	if m == nil {
		t.Fatalf("%s: no line matches %s", file, re)
	}
	line := strings.Count(string(b[:m[0]]), "\n") + 1
	return string(b[m[2]:m[3]]), fmt.Sprintf("%s:%d", file, line)
}
