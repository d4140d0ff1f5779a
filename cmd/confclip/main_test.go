package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/tools"
	"github.com/confclip/confclip/train"
)

// run runs the command line in this process and returns the exit status the
// program would have.
func run(t *testing.T, args ...string) int {
	t.Helper()
	err := newApp().Run(context.Background(), append([]string{"confclip"}, args...))
	if err == nil {
		return 0
	}
	t.Logf("confclip %s: %v", strings.Join(args, " "), err)
	return exitCode(err)
}

func TestEvalFailUnder(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "smoke.jsonl")
	var b strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&b, `{"id":"p%d","prompt":"Say %d:","answer":"x"}`+"\n", i, i)
	}
	os.WriteFile(data, []byte(b.String()), 0o644)
	// The format verifier accepts any completion, or none: accuracy 1, then 0.
	always := filepath.Join(dir, "always.toml")
	os.WriteFile(always, []byte("[verifier]\nname = \"format\"\npattern = \"\"\"(?s).*\"\"\"\n"), 0o644)
	never := filepath.Join(dir, "never.toml")
	os.WriteFile(never, []byte("[verifier]\nname = \"format\"\npattern = \"\"\"^NEVER$\"\"\"\n"), 0o644)
	base := []string{"eval", "--model", model, "--data", data, "--max-tokens", "4"}
	cases := []struct {
		config string
		under  string
		want   int
	}{
		{always, "0.9", 0},
		{never, "0.5", 3},
		{never, "0", 0},
	}
	for _, tc := range cases {
		args := append([]string{"--config", tc.config}, base...)
		args = append(args, "--fail-under", tc.under)
		if got := run(t, args...); got != tc.want {
			t.Errorf("%s --fail-under %s: exit %d, want %d", filepath.Base(tc.config), tc.under, got, tc.want)
		}
	}
	if got := run(t, "eval", "--model", filepath.Join(dir, "missing.gguf"), "--data", data); got != 1 {
		t.Errorf("a missing model: exit %d, want 1", got)
	}
}

func TestInspectBadFiles(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.gguf")
	os.WriteFile(empty, nil, 0o644)
	for _, p := range []string{filepath.Join(dir, "nope.gguf"), dir, empty} {
		if got := run(t, "inspect", p); got != 1 {
			t.Errorf("inspect %s: exit %d, want 1", p, got)
		}
	}
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	if got := run(t, "inspect", model); got != 0 {
		t.Errorf("inspect of a good model: exit %d", got)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[rollout]\ntemprature = 1\n"), 0o644)
	if got := run(t, "--config", bad, "inspect", model); got != 2 {
		t.Errorf("an unknown config key: exit %d, want 2 (a usage error)", got)
	}
}

// TestScoreCommandWorkedExamples runs METHOD.md's worked examples 1 and 2
// (plus an all-wrong group) through `confclip score` and checks the records
// field by field.
func TestScoreCommandWorkedExamples(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "scored.jsonl")
	summary := filepath.Join(dir, "summary.json")
	cfgPath := filepath.Join(dir, "exact.toml")
	os.WriteFile(cfgPath, []byte("[verifier]\nname = \"exact\"\n"), 0o644)
	in := filepath.Join("..", "..", "scoring", "testdata", "examples.jsonl")
	if got := run(t, "--config", cfgPath, "score", "--data", in, "--out", out, "--summary", summary,
		"--reward", "confclip", "--advantage", "grpo", "--confidence", "geo_mean"); got != 0 {
		t.Fatalf("score: exit %d", got)
	}
	want := map[string][][3]float64{ // confidence, reward, advantage (METHOD.md)
		"ex1": {{0.8, 0.8, 1.00401}, {0.5, 0.5, 0.61536}, {0.9, -0.9, -1.19834}, {0.3, -0.3, -0.42104}},
		"ex2": {{0.97, 0.95, 0.75377}, {0.6, 0.6, -1.35679}, {0.8, 0.8, -0.15075}, {0.99, 0.95, 0.75377}},
	}
	recs, _, _, err := dataset.ReadFile[dataset.Scored](out, false)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range recs {
		w, ok := want[r.PromptID]
		if !ok {
			continue
		}
		e := w[r.Sample]
		if math.Abs(r.Confidence-e[0]) > 1e-5 || math.Abs(r.Reward-e[1]) > 1e-5 || math.Abs(r.Advantage-e[2]) > 1e-5 {
			t.Errorf("%s/%d: confidence %.6f reward %.6f advantage %.6f, want %v", r.PromptID, r.Sample, r.Confidence, r.Reward, r.Advantage, e)
		}
		checked++
	}
	if checked != 8 {
		t.Fatalf("checked %d records, want 8", checked)
	}
	b, err := os.ReadFile(summary)
	if err != nil || !strings.Contains(string(b), `"zero_std_groups"`) {
		t.Fatalf("summary: %v %s", err, b)
	}
}

// runOut runs the command line with its output captured.
func runOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	app := newApp()
	var out strings.Builder
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(context.Background(), append([]string{"confclip"}, args...))
	if err != nil {
		t.Logf("confclip %s: %v", strings.Join(args, " "), err)
		fmt.Fprintln(&out, err)
		return exitCode(err), out.String()
	}
	return 0, out.String()
}

// TestHelpShowsConfigDefaults: every command's help shows the defaults of
// DefaultConfig, llama.cpp's aliases and the global --config.
func TestHelpShowsConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"rollout", []string{"--group int, -G int", "(default: 8)", "--max-tokens int, -n int, --n-predict int", "0 = the context left", "(default: 0)", "--temperature float, --temp float", "--ctx-size int, -c int, --ctx int", "(default: 2048)", "--gpu-layers int, --ngl int, --n-gpu-layers int", "--adapter FILE, --lora FILE", "--seed uint, -s uint", "--parallel int, --np int", "--chat-template", "--device", "--config FILE"}},
		{"score", []string{"--lambda float", "(default: 1)", "--lo float", "(default: 0.2)", "--hi float", "(default: 0.95)", "--format-pattern", "--timeout duration", "(default: 2s)", "--config FILE"}},
		{"train", []string{"--lora-rank int", "(default: 8)", "--lr float", "(default: 0.0001)", "--micro-batch int", "(default: 0)", "--grad-clip float", "--adapter-in"}},
		{"eval", []string{"--fail-under X", "--junit FILE", "--temp", "-ngl", "--config FILE"}},
	} {
		code, out := runOut(t, tc.cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", tc.cmd, code)
		}
		for _, w := range tc.want {
			if w == "-ngl" {
				w = "--ngl"
			}
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q:\n%s", tc.cmd, w, out)
			}
		}
		if strings.Contains(out, "--grad-clip float") && strings.Contains(out, "grad-clip float  clip the gradient's global norm, 0 = off ([train] grad_clip) (default: 0)") {
			t.Errorf("%s --help: grad-clip shows 0", tc.cmd)
		}
	}
}

// TestCommandLineHabits: flags after arguments, --config after the command,
// did-you-mean for unknown flags and commands, --fail-under's range.
func TestCommandLineHabits(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	if code, out := runOut(t, "inspect", model, "--json"); code != 0 || !strings.Contains(out, `"architecture": "llama"`) {
		t.Errorf("inspect M --json: exit %d\n%s", code, out)
	}
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, []byte("[model]\npath = \""+model+"\"\n"), 0o644)
	if code, out := runOut(t, "tokenize", "ab", "--config", cfg); code != 0 || strings.Count(out, "\n") < 2 {
		t.Errorf("tokenize TEXT --config C: exit %d\n%s", code, out)
	}
	if code, out := runOut(t, "rollout", "--tmep", "1"); code != 2 || !strings.Contains(out, "not defined: --tmep (did you mean --temp?)") {
		t.Errorf("an unknown flag: exit %d: %s", code, out)
	}
	if code, out := runOut(t, "rolout"); code != 2 || !strings.Contains(out, `did you mean "rollout"?`) {
		t.Errorf("an unknown command: exit %d: %s", code, out)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[rollout]\ntemprature = 1\n"), 0o644)
	if code, _ := runOut(t, "version", "--config", bad); code != 2 {
		t.Errorf("an unknown config key: exit %d, want 2 (usage)", code)
	}
	if code, out := runOut(t, "eval", "-m", model, "--data", cfg, "--fail-under", "50"); code != 2 || !strings.Contains(out, "0..1") {
		t.Errorf("--fail-under 50: exit %d: %s", code, out)
	}
}

func TestUnescapeStop(t *testing.T) {
	for in, want := range map[string]string{
		`a,b`: "a,b", `\n`: "\n", `Q:\t`: "Q:\t", `\\n`: `\n`, `\x`: `\x`, `end\`: `end\`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEvalJUnitAndFailures: through the command line, a prompt that cannot
// be generated is counted wrong and listed, and the JUnit report is written.
func TestEvalJUnitAndFailures(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "smoke.jsonl")
	os.WriteFile(data, []byte(`{"id":"p0","prompt":"Say 0:","answer":"x"}
{"id":"p1","prompt":"`+strings.Repeat("Say 1 2 3 ", 20)+`","answer":"x"}
{"id":"p2","prompt":"","answer":"x"}
`), 0o644) // p1 does not fit -c 64; p2 is empty: both count as wrong and are listed

	always := filepath.Join(dir, "always.toml")
	os.WriteFile(always, []byte("[verifier]\nname = \"format\"\npattern = \"\"\"(?s).*\"\"\"\n"), 0o644)
	junit := filepath.Join(dir, "report.xml")
	code, out := runOut(t, "eval", "-m", model, "--data", data, "-n", "3", "-c", "64", "--config", always, "--junit", junit, "--fail-under", "0.9")
	if code != 3 || !strings.Contains(out, "accuracy     0.3333") || !strings.Contains(out, `smoke.jsonl:2: id "p1"`) ||
		!strings.Contains(out, `smoke.jsonl:3: id "p2"`) || !strings.Contains(out, "empty prompt") {
		t.Fatalf("eval with an empty prompt: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(junit)
	if err != nil || strings.Count(string(b), "<testcase ") != 3 || !strings.Contains(string(b), `errors="2"`) {
		t.Fatalf("JUnit report: %v\n%s", err, b)
	}
	// Without -n a completion gets the context left after its prompt: a
	// small -c is no reason to fail a prompt that fits.
	short := filepath.Join(dir, "short.jsonl")
	os.WriteFile(short, []byte(`{"id":"p0","prompt":"Say 0:","answer":"x"}`+"\n"), 0o644)
	if code, out := runOut(t, "eval", "-m", model, "--data", short, "-c", "32", "--config", always, "--fail-under", "1"); code != 0 || !strings.Contains(out, "accuracy     1.0000") {
		t.Errorf("eval -c 32 without -n: exit %d\n%s", code, out)
	}
	code, out = runOut(t, "eval", "-m", model, "--data", data, "-n", "3", "-c", "64", "--config", always, "--json")
	if code != 0 || !strings.Contains(out, `"auroc": null`) || !strings.Contains(out, `"pass_at_k": null`) {
		t.Fatalf("eval --json: exit %d\n%s", code, out)
	}
}

// TestRunTakesStageFlags: run takes every stage's flags, a flag wins over the
// file, and resuming below the steps done is an error.
func TestRunTakesStageFlags(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "train.jsonl")
	os.WriteFile(data, []byte("{\"id\":\"a\",\"prompt\":\"Say 1:\",\"answer\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"Say 2:\",\"answer\":\"x\"}\n"), 0o644)
	cfg := filepath.Join(dir, "loop.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[model]
path = %q
ctx = 64
[data]
train = %q
[verifier]
name = "format"
pattern = "^\\s*[a-m]"
[rollout]
group = 2
max_tokens = 4
temperature = 1.0
[train]
lora_rank = 2
micro_batch = 64
[run]
steps = 2
prompts_per_step = 2
out = %q
`, model, data, filepath.Join(dir, "run"))), 0o644)
	if code, out := runOut(t, "run", cfg, "--temp", "0.5", "--lora-rank", "4"); code != 0 {
		t.Fatalf("run --temp 0.5: exit %d\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "run", pipeline.RunConfigFile))
	if err != nil || !strings.Contains(string(b), "temperature = 0.5") || !strings.Contains(string(b), "lora_rank = 4") {
		t.Fatalf("the flags did not win over the file: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "strict = true") {
		t.Errorf("run's verifier is not strict by default:\n%s", b)
	}
	// verify keeps the last-number fallback unless --strict.
	for strict, want := range map[string]string{"false": `"correct":true`, "true": `"correct":false`} {
		if code, out := runOut(t, "verify", "--answer", "8", "--completion", "Tom has 3 apples and gets 8", "--strict="+strict); code != 0 || !strings.Contains(out, want) {
			t.Errorf("verify --strict=%s: exit %d\n%s", strict, code, out)
		}
	}
	code, out := runOut(t, "run", cfg, "--temp", "0.5", "--lora-rank", "4", "--resume", "--steps", "3")
	if code != 0 || !strings.Contains(out, "resuming "+filepath.Join(dir, "run")+" at step 3 of 3") {
		t.Errorf("run --resume --steps 3 after 2 steps: exit %d, no resume line\n%s", code, out)
	}
	code, out = runOut(t, "run", cfg, "--temp", "0.5", "--lora-rank", "4", "--resume", "--steps", "1")
	if code != 1 || !strings.Contains(out, "has done 3 steps") {
		t.Fatalf("run --resume --steps 1 after 3 steps: exit %d\n%s", code, out)
	}
}

// TestAdapterExportBaseModel: --base-model sets PEFT's
// base_model_name_or_path (what AutoPeftModelForCausalLM loads); without it
// the GGUF's name stands in.
func TestAdapterExportBaseModel(t *testing.T) {
	dir := t.TempDir()
	model, adapter := filepath.Join(dir, "m.gguf"), filepath.Join(dir, "a.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	err = train.CreateLoRA(m, adapter, train.Config{LoraRank: 2, LoraAlpha: 4, Seed: 1})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flag, want string }{{"Qwen/Qwen2.5-0.5B", `"base_model_name_or_path": "Qwen/Qwen2.5-0.5B"`}, {"", `"base_model_name_or_path": "`}} {
		peft := filepath.Join(dir, "peft"+tc.flag[:min(len(tc.flag), 4)])
		args := []string{"adapter", "export", "-m", model, "--adapter", adapter, "--peft", peft}
		if tc.flag != "" {
			args = append(args, "--base-model", tc.flag)
		}
		if code, out := runOut(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, out)
		}
		b, _ := os.ReadFile(filepath.Join(peft, "adapter_config.json"))
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("--base-model %q: %s", tc.flag, b)
		}
	}
}

// TestFailEarly: rollout refuses, before any compute, prompts without the
// reference answer their verifier needs, naming the prompt file's lines
// (--allow-no-answer samples them anyway); a reference of the wrong type
// says which types are expected.
func TestFailEarly(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "p.jsonl")
	os.WriteFile(data, []byte(`{"id":"a","prompt":"Say 1:","answer":"1"}
{"id":"b","prompt":"Say 2:"}
`), 0o644)
	out := filepath.Join(dir, "r.jsonl")
	code, msg := runOut(t, "rollout", "-m", model, "--data", data, "--out", out, "-n", "2", "-G", "2", "-c", "32")
	if code != 1 || !strings.Contains(msg, "p.jsonl:2: prompt \"b\" has no reference answer, which the math verifier needs") || !strings.Contains(msg, "--allow-no-answer") {
		t.Errorf("a prompt without an answer: exit %d\n%s", code, msg)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the refused rollout wrote its output")
	}
	if code, msg := runOut(t, "rollout", "-m", model, "--data", data, "--out", out, "-n", "2", "-G", "2", "-c", "32", "--allow-no-answer"); code != 0 ||
		!strings.Contains(msg, "chat template for messages only") || !strings.Contains(msg, "2 groups (4 completions") {
		t.Errorf("--allow-no-answer: exit %d\n%s", code, msg)
	}
	os.WriteFile(data, []byte(`{"id":"a","prompt":"Say 1:","answer":["5"]}`+"\n"), 0o644)
	if code, msg := runOut(t, "rollout", "-m", model, "--data", data, "--out", filepath.Join(dir, "r2.jsonl")); code == 0 ||
		!strings.Contains(msg, "answer: a list of strings: want text, a number, or a list of {role, content} messages") {
		t.Errorf(`"answer": ["5"]: exit %d\n%s`, code, msg)
	}
}

// TestLicenses: version --licenses prints the project's MIT licence and the
// notices of what the binary links, llama.cpp's (and ggml's) licence as laid
// down from the pinned module and ollama's among them.
func TestLicenses(t *testing.T) {
	code, out := runOut(t, "version", "--licenses")
	if code != 0 {
		t.Fatalf("version --licenses: exit %d\n%s", code, out)
	}
	llamaLicense, err := os.ReadFile("../../third_party/llama.cpp/LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MIT License\n\nCopyright (c) 2026 The confclip authors", strings.TrimSpace(string(llamaLicense)),
		"Copyright (c) 2023-2026 The ggml authors", "llama.cpp (https://github.com/ggml-org/llama.cpp)", "ggml (https://github.com/ggml-org/ggml)"} {
		if !strings.Contains(out, want) {
			t.Errorf("version --licenses lacks %q", want)
		}
	}
	// Every patch to llama.cpp or ggml says in its header whose MIT code it modifies.
	patches, _ := filepath.Glob("../../third_party/patches/*/*.patch")
	if len(patches) == 0 {
		t.Fatal("no patches found")
	}
	for _, p := range patches {
		b, _ := os.ReadFile(p)
		head, _, _ := strings.Cut(string(b), "\n--- a/")
		if !regexp.MustCompile(`Licence: this patch modifies (llama\.cpp|ggml)[^\n]*MIT licence`).MatchString(head) {
			t.Errorf("%s: the header does not name the upstream licence", filepath.Base(p))
		}
	}
}

// TestVerifyExactCase: the exact verifier ignores case by default, as
// [verifier] case_fold's default says; --case-fold=false (or the key) makes
// it case-sensitive; the reason says which decided.
func TestVerifyExactCase(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, `"correct":true,"score":1,"extracted":"PARIS","answer_span":[14,19],"reason":"matches the reference, ignoring case"`},
		{[]string{"--case-fold=false"}, `"correct":false,"score":0,"extracted":"PARIS","answer_span":[14,19],"reason":"differs from the reference \"Paris\" in case only (case_fold is off)"`},
		{[]string{"--ignore-punct", "--completion", "Paris!"}, `"correct":true`},
	} {
		args := append([]string{"verify", "--verifier", "exact", "--answer", "Paris", "--completion", "The answer is PARIS."}, c.flags...)
		if code, out := runOut(t, args...); code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d\n%s\nwant %s", args, code, out, c.want)
		}
	}
}

// TestVersionNamesLlamaCommit: `confclip version` prints the llama.cpp
// commit the linked libraries were built from and whether it is the pin;
// a build from the pin (third_party/llama.cpp/.stamp starts with
// scripts/llama-source.sh's PIN) prints the pin's commit, llama.LlamaCommit.
func TestVersionNamesLlamaCommit(t *testing.T) {
	code, out := runOut(t, "version")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	lib := llama.LibraryCommit()
	stamp, err := os.ReadFile("../../third_party/llama.cpp/.stamp")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../scripts/llama-source.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PIN="([^"]+)"$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("scripts/llama-source.sh has no PIN= line")
	}
	want := "llama.cpp " + lib + ", not the pin " + llama.LlamaCommit
	if strings.HasPrefix(string(stamp), string(m[1])+" ") {
		want = "llama.cpp " + llama.LlamaCommit + ", the pin"
	}
	if !strings.Contains(out, want) {
		t.Errorf("version says\n%s\nwant a line with %q", out, want)
	}
}
