package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/testkit/testutil"
)

// TestRealModelsCommands runs the commands a user runs on the real
// pre-trained models that `make real-models` lays down (NOT RUN without
// them): inspect, tokenize (the special tokens' ids that each model's
// published tokenizer gives), then a small loop of chat prompts through the
// model's chat template: rollout, logprobs, score, export, train with the
// adapter applied by eval.
func TestRealModelsCommands(t *testing.T) {
	for _, c := range []struct {
		name, arch, tmpl, special string
		ids                       []string // tokenize --parse-special special+"user"
	}{
		{"smollm2-135m-instruct", "llama", "", "<|im_start|>", []string{"1", "4093"}},
		{"gemma3-270m", "gemma3", "gemma", "<start_of_turn>", []string{"2", "105", "2364"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := testutil.RealModel(t, c.name)
			dir := t.TempDir()
			code, out := runOut(t, "inspect", model, "--json")
			var info struct{ Architecture string }
			if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Architecture != c.arch {
				t.Fatalf("inspect: status %d, architecture %q, want %q\n%s", code, info.Architecture, c.arch, out)
			}
			code, out = runOut(t, "tokenize", "-m", model, "--parse-special", c.special+"user")
			var ids []string
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(l); len(f) > 0 {
					ids = append(ids, f[0])
				}
			}
			if code != 0 || strings.Join(ids, " ") != strings.Join(c.ids, " ") {
				t.Fatalf("tokenize: status %d, ids %v, want %v\n%s", code, ids, c.ids, out)
			}

			prompts := filepath.Join(dir, "prompts.jsonl")
			var lines []string
			for i, q := range [][2]string{{"Tom has 3 apples and gets 4 more. How many apples?", "7"}, {"What is 2 plus 2?", "4"}} {
				b, _ := json.Marshal(map[string]any{"id": string(rune('a' + i)), "answer": q[1], "messages": []map[string]string{
					{"role": "system", "content": "Solve the problem. End with: The answer is N."}, {"role": "user", "content": q[0]}}})
				lines = append(lines, string(b))
			}
			if err := os.WriteFile(prompts, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			tmpl := []string{}
			if c.tmpl != "" {
				tmpl = []string{"--chat-template", c.tmpl}
			}
			p := func(f string) string { return filepath.Join(dir, f) }
			steps := [][]string{
				append([]string{"rollout", "-m", model, "--data", prompts, "--out", p("ro.jsonl"), "-G", "4", "-n", "24", "--temp", "1", "-s", "3"}, tmpl...),
				{"logprobs", "-m", model, "--data", p("ro.jsonl"), "--out", p("lp.jsonl")},
				{"score", "--data", p("ro.jsonl"), "--out", p("sc.jsonl"), "--summary", p("summary.json")},
				{"export", "--data", p("sc.jsonl"), "--out", p("train.parquet")},
				{"train", "-m", model, "--data", p("train.parquet"), "--adapter-out", p("adapter.gguf")},
				append([]string{"eval", "-m", model, "--adapter", p("adapter.gguf"), "--data", prompts, "-n", "24", "--json"}, tmpl...),
			}
			for _, s := range steps {
				if code, out := runOut(t, s...); code != 0 {
					t.Fatalf("confclip %s: status %d\n%s", strings.Join(s, " "), code, out)
				}
			}
			var recs []struct {
				Prompt   string
				Tokens   []int
				Logprobs []float64
			}
			b, err := os.ReadFile(p("ro.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var r struct {
					Prompt   string
					Tokens   []int
					Logprobs []float64
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatal(err)
				}
				recs = append(recs, r)
			}
			if len(recs) != 8 || !strings.Contains(recs[0].Prompt, c.special) || len(recs[0].Tokens) == 0 || len(recs[0].Logprobs) != len(recs[0].Tokens) {
				t.Fatalf("rollout: %d records, the first %+v; want 8, rendered with %s", len(recs), recs[0], c.special)
			}
			if _, err := os.Stat(p("adapter.gguf")); err != nil {
				t.Fatalf("train wrote no adapter: %v", err)
			}
		})
	}
}
