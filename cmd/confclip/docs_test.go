package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/pipeline"
)

// docFiles are the pages whose commands TestDocumentedCommands runs.
var docFiles = []string{"README.md", "docs/quickstart.md", "docs/recipes.md"}

// TestDocumentedCommands runs every confclip command of the README, the
// quick start and the recipes, as written, in a folder that holds the files
// they name: M.gguf (the generated tiny model), prompts.jsonl, test.jsonl,
// smoke.jsonl (prompts with answers), completions.jsonl (the recipe's
// records), CONFIG.toml and my.toml (a run on those). Commands run in page
// order, so that a stage reads what the one before wrote. $CONFCLIP_CONFIG
// keeps everything small (4 tokens a completion) and makes every answer
// right (a format verifier that takes anything), so --fail-under passes.
func TestDocumentedCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []docCommand
	for _, f := range docFiles {
		found, err := documentedCommands(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if len(found) == 0 {
			t.Fatalf("%s: no commands found", f)
		}
		cmds = append(cmds, found...)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	writeDocFixtures(t, dir)
	for _, c := range cmds {
		code, out := runOut(t, c.args...)
		if asksGPU(c.args) && code == 1 && strings.Contains(out, "no GPU backend") {
			// A GPU recipe on a CPU-only build: the documented clear error,
			// not a silent CPU run (the Vulkan CI step runs it on a device).
			continue
		}
		if code != 0 {
			t.Errorf("%s:%d: %s: exit %d\n%s", c.file, c.line, c.text, code, out)
		}
	}
	t.Logf("ran %d documented commands", len(cmds))
}

// asksGPU reports whether a command offloads layers (-ngl N, N != 0).
func asksGPU(args []string) bool {
	for i, a := range args {
		switch a {
		case "-ngl", "--ngl", "--gpu-layers", "--n-gpu-layers":
			if i+1 < len(args) && args[i+1] != "0" {
				return true
			}
		}
	}
	return false
}

type docCommand struct {
	file string
	line int
	text string
	args []string
}

// documentedCommands returns the code lines of a Markdown page (indented
// four spaces, or inside a fence) that run confclip.
func documentedCommands(path string) ([]docCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []docCommand
	sc := bufio.NewScanner(f)
	n, fenced := 0, false
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced && !strings.HasPrefix(line, "    ") {
			continue
		}
		text := strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(text, "bin/confclip ")
		if !ok {
			if rest, ok = strings.CutPrefix(text, "confclip "); !ok {
				continue
			}
		}
		args, err := shellWords(rest)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		out = append(out, docCommand{file: filepath.Base(path), line: n, text: text, args: args})
	}
	return out, sc.Err()
}

// shellWords splits a command line as sh does for the quoting the docs use
// ('...', "...", backslash), ending at an unquoted #.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			return words, nil
		case ch == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ch == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case ch == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			i++
			inWord = true
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

func writeDocFixtures(t *testing.T, dir string) {
	t.Helper()
	if err := pipeline.GenModel(pipeline.GenModelOptions{Out: "M.gguf"}); err != nil {
		t.Fatal(err)
	}
	var prompts strings.Builder
	for i := range 4 {
		fmt.Fprintf(&prompts, `{"id":"p%d","prompt":"Say %d:","answer":"%d"}`+"\n", i, i, i)
	}
	files := map[string]string{
		"prompts.jsonl": prompts.String(), "test.jsonl": prompts.String(), "smoke.jsonl": prompts.String(),
		"responses.jsonl": serverResponses(), // formats_test.go
		"completions.jsonl": `{"prompt_id": "q1", "sample": 0, "prompt": "What is 2+2?", "text": "It is 4.", "answer": "4"}
{"prompt_id": "q1", "sample": 1, "prompt": "What is 2+2?", "text": "5", "answer": "4"}
`,
		"small.toml": `[model]
ctx = 128
threads = 2
[rollout]
group = 2
max_tokens = 4
[verifier]
name = "format"
pattern = """(?s).*"""
`,
	}
	run := func(out string) string {
		return `[model]
path = "M.gguf"
ctx = 128
threads = 2
[data]
train = "prompts.jsonl"
eval = "test.jsonl"
[rollout]
group = 2
max_tokens = 4
[verifier]
name = "format"
pattern = """(?s).*"""
[train]
lora_rank = 2
micro_batch = 128
[run]
steps = 1
prompts_per_step = 2
eval_every = 100
out = "` + out + `"
[experiment]
arms = ["binary_grpo", "confclip_grpo"]
seeds = [1]
`
	}
	files["CONFIG.toml"] = run("runs/config")
	files["my.toml"] = run("runs/my")
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CONFCLIP_CONFIG", filepath.Join(dir, "small.toml"))
}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`verify --answer '\frac{1}{2}' --completion "so \boxed{0.5}" --stop '\n' -n 3 # comment`)
	want := []string{"verify", "--answer", `\frac{1}{2}`, "--completion", `so \boxed{0.5}`, "--stop", `\n`, "-n", "3"}
	if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("shellWords: %q, %v; want %q", got, err, want)
	}
}
