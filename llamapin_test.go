package confclip

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestLlamaCommitMatchesPin ties the llama.cpp commit the binary reports
// (llama.LlamaCommit: confclip version, inspect) and the one CMakeLists.txt
// compiles into ggml (GGML_BUILD_COMMIT) to the commit scripts/llama-source.sh
// lays down (LLAMA_COMMIT), so a bump that changes one changes all three.
// The files are read as text: the test links no llama.cpp.
func TestLlamaCommitMatchesPin(t *testing.T) {
	pin, pinAt := findIn(t, "scripts/llama-source.sh", `(?m)^LLAMA_COMMIT=([0-9a-f]+)$`)
	for _, c := range []struct{ name, file, re string }{
		{"LlamaCommit", "llama/llama.go", `(?m)^const LlamaCommit = "([0-9a-f]+)"$`},
		{"GGML_BUILD_COMMIT", "CMakeLists.txt", `(?m)^set\(GGML_BUILD_COMMIT "([0-9a-f]+)"\)$`},
	} {
		if got, at := findIn(t, c.file, c.re); got != pin {
			t.Errorf("%s: %s is %q, but %s pins LLAMA_COMMIT=%s; change them together", at, c.name, got, pinAt, pin)
		}
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
