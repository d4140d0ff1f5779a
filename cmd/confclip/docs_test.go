package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/reporting"
	"github.com/confclip/confclip/tools"
	"github.com/confclip/confclip/train"
	"github.com/urfave/cli/v3"
)

// docFiles are the pages whose commands TestDocumentedCommands runs: every
// page that shows a confclip command.
var docFiles = []string{"README.md", "docs/quickstart.md", "docs/recipes.md", "docs/export.md", "docs/formats.md",
	"docs/rollout.md", "docs/scale.md", "docs/training-speed.md", "docs/verifiers.md"}

// TestDocumentedCommands runs every confclip command of the pages in
// docFiles, as written, in a folder that holds the files they name: M.gguf
// and model.gguf (the generated tiny model), A.gguf and step3.gguf (LoRA
// adapters for it), prompts.jsonl, test.jsonl, smoke.jsonl (prompts with
// answers), qa.jsonl (other field names), cases.jsonl (answers and
// completions), examples.jsonl (a training set), completions.jsonl (the
// recipe's records), CONFIG.toml and my.toml (a run on those). Commands run in page order, so that a stage
// reads what the one before wrote. $CONFCLIP_CONFIG keeps everything small
// (4 tokens a completion) and makes every answer right (a format verifier
// that takes anything), so --fail-under passes.
//
// A synopsis (a line with [optional] flags) is not run: every flag it names
// must be one of its command's. A block after a line "<!-- not run: WHY -->"
// is not run either (a script for N machines over ssh, a server that runs
// until stopped); the test says so with the reason, which names the test
// that covers it.
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
	ran := 0
	for _, c := range cmds {
		if c.notRun != "" {
			t.Logf("%s:%d: not run (%s): %s", c.file, c.line, c.notRun, c.text)
			continue
		}
		if c.synopsis {
			checkSynopsis(t, c)
			continue
		}
		ran++
		code, out := runOut(t, c.args...)
		if asksGPU(c.args) && code == 1 && strings.Contains(out, llama.ErrNoGPU.Error()) {
			// A GPU recipe on a CPU-only build, or on a GPU build where
			// its backend finds no device (CI's CUDA build): the
			// documented clear error, not a silent CPU run (the Vulkan CI
			// step runs it on a device).
			continue
		}
		if code != 0 {
			t.Errorf("%s:%d: %s: exit %d\n%s", c.file, c.line, c.text, code, out)
		}
	}
	t.Logf("ran %d documented commands of %d", ran, len(cmds))
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
	file     string
	line     int
	text     string
	args     []string
	synopsis bool   // [optional] flags: checked, not run
	notRun   string // the reason its block gives
}

// checkSynopsis checks that every flag of a synopsis line is one of its
// command's or of a command above it, or help (subcommands followed down
// from the words before the flags).
func checkSynopsis(t *testing.T, c docCommand) {
	t.Helper()
	cmd := newApp()
	chain := []*cli.Command{cmd}
	for _, a := range c.args {
		a = strings.Trim(a, "[].")
		if a == "" {
			continue
		}
		if !strings.HasPrefix(a, "-") {
			if sub := cmd.Command(a); sub != nil {
				cmd = sub
				chain = append(chain, sub)
			}
			continue
		}
		name := strings.TrimLeft(a, "-")
		found := slices.Contains(cli.HelpFlag.Names(), name)
		for _, cc := range chain {
			for _, f := range cc.Flags {
				found = found || slices.Contains(f.Names(), name)
			}
		}
		if !found {
			t.Errorf("%s:%d: %s: %s has no flag %s", c.file, c.line, c.text, cmd.Name, a)
		}
	}
}

// documentedCommands returns the code lines of a Markdown page (indented
// four spaces, or inside a fence) that run confclip; a line ending in a
// backslash goes on in the next.
func documentedCommands(path string) ([]docCommand, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []docCommand
	sc := bufio.NewScanner(f)
	n, fenced := 0, false
	notRun := "" // a "not run" note covers the block right after it
	for sc.Scan() {
		n++
		line := sc.Text()
		if why, ok := strings.CutPrefix(strings.TrimSpace(line), "<!-- not run:"); ok {
			notRun = strings.TrimSpace(strings.TrimSuffix(why, "-->"))
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			if !fenced {
				notRun = ""
			}
			continue
		}
		if !fenced && !strings.HasPrefix(line, "    ") {
			if strings.TrimSpace(line) != "" {
				notRun = ""
			}
			continue
		}
		start := n
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
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
		out = append(out, docCommand{file: filepath.Base(path), line: start, text: text, args: args,
			synopsis: strings.Contains(text, "[-"), notRun: notRun})
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
		case ch == '\'' || ch == '"':
			j := strings.IndexByte(s[i+1:], ch)
			if j < 0 {
				return nil, fmt.Errorf("unclosed %c in %q", ch, s)
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
	for _, name := range []string{"M.gguf", "model.gguf"} {
		if err := tools.GenModel(tools.GenModelOptions{Out: name}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := llama.LoadModel("M.gguf", llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"A.gguf", "step3.gguf"} {
		if err := train.CreateLoRA(m, name, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1}); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	var prompts strings.Builder
	for i := range 4 {
		fmt.Fprintf(&prompts, `{"id":"p%d","prompt":"Say %d:","answer":"%d"}`+"\n", i, i, i)
	}
	files := map[string]string{
		"prompts.jsonl": prompts.String(), "test.jsonl": prompts.String(), "smoke.jsonl": prompts.String(),
		"examples.jsonl": `{"prompt_id":"p","sample":0,"prompt_ids":[1,5,6],"completion_ids":[7,8,9],"advantage":1}` + "\n" +
			`{"prompt_id":"p","sample":1,"prompt_ids":[1,5,6],"completion_ids":[7,8,10],"advantage":-1}` + "\n",
		"qa.jsonl":        `{"question":"What is 2+2?","solution":"2+2 = \\boxed{4}"}` + "\n",
		"cases.jsonl":     `{"answer":"\\frac12","completion":"So $\\boxed{0.5}$."}` + "\n" + `{"answer":"3","completion":"It is 4."}` + "\n",
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

// inlineSpan finds `confclip ...` in a page's prose, a span that may wrap
// over lines.
var inlineSpan = regexp.MustCompile("`((?:bin/)?confclip [^`]+)`")

// TestInlineCommandFlags: the commands the pages name in their prose (the
// guide's synopses, `confclip gen-model --arch A --out m.gguf` in a
// sentence) use only flags their commands have. They are not run (they
// hold placeholders: M.gguf, ARCH, DIR); TestDocumentedCommands runs the
// code blocks.
func TestInlineCommandFlags(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range inlineSpan.FindAllStringSubmatchIndex(text, -1) {
			span := strings.Join(strings.Fields(text[m[2]:m[3]]), " ")
			args, err := shellWords(strings.TrimPrefix(strings.TrimPrefix(span, "bin/"), "confclip "))
			if err != nil {
				t.Errorf("%s: %v", filepath.Base(p), err)
				continue
			}
			line := 1 + strings.Count(text[:m[0]], "\n")
			checkSynopsis(t, docCommand{file: filepath.Base(p), line: line, text: span, args: args})
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no inline commands found")
	}
	t.Logf("checked the flags of %d inline commands", checked)
}

// TestDocumentedClaims checks what the pages say beyond their commands:
// the quick start's demo table and model file are the ones the demo makes,
// and the help and docs/config.md tell the same --threads default.
func TestDocumentedClaims(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	quick, makefile := read("../../docs/quickstart.md"), read("../../Makefile")
	header, _, _ := strings.Cut(reporting.ExperimentTable(nil, 1), "\n")
	if !strings.Contains(quick, "    "+header+"\n") {
		t.Errorf("docs/quickstart.md does not show the table experiment prints:\n%s", header)
	}
	for _, m := range regexp.MustCompile(`build/demo/[a-z]+\.gguf`).FindAllString(quick, -1) {
		if !strings.Contains(makefile, strings.Replace(m, "build/demo", "$(DEMO)", 1)) {
			t.Errorf("docs/quickstart.md names %s, which make demo does not write", m)
		}
	}
	for _, f := range []string{"--ops word"} {
		if strings.Contains(makefile, f) != strings.Contains(quick, "`"+f+"`") {
			t.Errorf("docs/quickstart.md and the Makefile's demo disagree on %s", f)
		}
	}
	var threads string
	for _, f := range modelFlags() {
		if f.Names()[0] == "threads" {
			threads = f.(*cli.IntFlag).Usage
		}
	}
	row := regexp.MustCompile("(?m)^\\| `model.threads` .*$").FindString(read("../../docs/config.md"))
	if !strings.Contains(threads, "5M parameters") || !strings.Contains(row, "5M parameters") {
		t.Errorf("--threads and docs/config.md disagree on 0:\n%s\n%s", threads, row)
	}
	// The exit statuses: the guide's table is the code's.
	guide := read("../../docs/guide.md")
	for _, code := range []int{exitOK, exitError, exitUsage, exitFailUnder, exitInternal, 130} {
		if !strings.Contains(guide, fmt.Sprintf("\n| %d | ", code)) {
			t.Errorf("docs/guide.md's exit-status table lacks %d", code)
		}
	}
	// advantage.mask_truncated: one meaning in the config table and the export page.
	if !strings.Contains(read("../../docs/config.md"), "zero completion mask") || !strings.Contains(read("../../docs/export.md"), "`completion_mask` of zeros") {
		t.Error("docs/config.md and docs/export.md disagree on advantage.mask_truncated")
	}
}
