package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/dataset/parquetio"
	"github.com/confclip/confclip/tools"
)

// Each prompt shape of docs/formats.md, written by hand as a user has it,
// goes through rollout → score → export (TRL and verl columns) with no
// conversion code; the gold answer arrives in the export's answer columns.
func TestPromptShapesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	type verlMsg struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	}
	type verlRM struct {
		GroundTruth string `parquet:"ground_truth"`
		Style       string `parquet:"style"`
	}
	type verlExtra struct {
		Index int64  `parquet:"index"`
		Split string `parquet:"split"`
	}
	type verlRow struct {
		DataSource  string    `parquet:"data_source"`
		Prompt      []verlMsg `parquet:"prompt,list"`
		Ability     string    `parquet:"ability"`
		RewardModel verlRM    `parquet:"reward_model"`
		ExtraInfo   verlExtra `parquet:"extra_info"`
	}
	verl := filepath.Join(dir, "verl.parquet")
	if err := parquet.WriteFile(verl, []verlRow{
		{"openai/gsm8k", []verlMsg{{"user", "What is 2+5?"}}, "math", verlRM{"7", "rule"}, verlExtra{0, "train"}},
		{"openai/gsm8k", []verlMsg{{"user", "What is 3*3?"}}, "math", verlRM{"9", "rule"}, verlExtra{1, "train"}},
	}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file string
		extra      []string
		shape      string
		ids        []string
		answers    []string
	}{
		{"confclip", write("own.jsonl", `{"id":"a","prompt":"1+1=","answer":"2"}`+"\n"), nil, "confclip", []string{"a"}, []string{"2"}},
		{"trl standard", write("trl.jsonl", `{"prompt":"1+1=","solution":"2"}`+"\n"+`{"prompt":"2+2=","solution":"4"}`+"\n"), nil, "trl standard", []string{"1", "2"}, []string{"2", "4"}},
		{"trl conversational", write("conv.jsonl", `{"prompt":[{"role":"user","content":"1+2?"}],"solution":"3"}`+"\n"), nil, "trl conversational", []string{"1"}, []string{"3"}},
		{"verl", verl, nil, "verl parquet", []string{"0", "1"}, []string{"7", "9"}},
		{"gsm8k", write("gsm8k.jsonl", `{"question":"Tom has 70 apples and buys 2. How many?","answer":"70+2 = 72\n#### 72"}`+"\n"), nil, "gsm8k", []string{"1"}, []string{"72"}},
		{"math", write("math.jsonl", `{"problem":"What is $1+1$?","solution":"Adding, $\\boxed{2}$.","level":"Level 1"}`+"\n"), nil, "math", []string{"1"}, []string{"2"}},
		{"mapped", write("other.jsonl", `{"q":"5-1=","sol":"so \\boxed{4}"}`+"\n"), []string{"--map", "prompt=q,answer=sol:boxed"}, "mapped", []string{"1"}, []string{"4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			ro, sc := filepath.Join(sub, "rollouts.jsonl"), filepath.Join(sub, "scored.jsonl")
			args := append([]string{"rollout", "-m", model, "--data", tc.file, "--out", ro, "-G", "2", "-n", "4", "--no-timing"}, tc.extra...)
			if code := run(t, args...); code != 0 {
				t.Fatalf("rollout: exit %d", code)
			}
			rs, _, _, err := dataset.ReadFile[dataset.Rollout](ro, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 2*len(tc.ids) {
				t.Fatalf("%d rollouts, want %d", len(rs), 2*len(tc.ids))
			}
			pf, err := dataset.ReadPromptFile(tc.file, strings.Join(mapArg(tc.extra), ""), false)
			if err != nil || !strings.Contains(pf.Shape, tc.shape) {
				t.Errorf("shape %q (%v), want %q", pf.Shape, err, tc.shape)
			}
			if code := run(t, "score", "--data", ro, "--out", sc, "--reward", "binary", "--verifier", "math"); code != 0 {
				t.Fatalf("score: exit %d", code)
			}
			for _, layout := range []string{"trl", "verl,parquet"} {
				out := filepath.Join(sub, "train-"+strings.ReplaceAll(layout, ",", "."))
				if code := run(t, "export", "--data", sc, "--out", out, "--format", layout); code != 0 {
					t.Fatalf("export %s: exit %d", layout, code)
				}
				var rows []map[string]any
				if strings.HasSuffix(layout, "parquet") {
					rows, err = parquetio.ReadRows(out)
				} else {
					rows, _, _, err = dataset.ReadFile[map[string]any](out, false)
				}
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range rows {
					id, answer := r["prompt_id"], r["solution"]
					if layout != "trl" {
						rm, _ := r["reward_model"].(map[string]any)
						id, answer = r["uid"], rm["ground_truth"]
					}
					if id != tc.ids[i/2] || answer != tc.answers[i/2] {
						t.Errorf("%s row %d: id %v answer %v, want %s %s", layout, i, id, answer, tc.ids[i/2], tc.answers[i/2])
					}
				}
			}
		})
	}
}

func mapArg(extra []string) []string {
	for i, a := range extra {
		if a == "--map" && i+1 < len(extra) {
			return extra[i+1 : i+2]
		}
	}
	return nil
}

// An OpenAI chat-completions file (one response of n = 2 choices per
// prompt, server log-probs, no token ids) scores with the binary and the
// confclip reward without a model; export then says the tokens are
// missing, and scoring with the model fills them so that export works.
func TestOpenAICompletionsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	prompts := filepath.Join(dir, "gsm8k.jsonl")
	os.WriteFile(prompts, []byte(`{"question":"1+1?","answer":"so\n#### 2"}`+"\n"+`{"question":"2+3?","answer":"so\n#### 5"}`+"\n"), 0o644)
	chat := func(a, b string) string {
		return `{"id":"chatcmpl-x","object":"chat.completion","model":"tiny","choices":[` +
			`{"index":0,"message":{"role":"assistant","content":"` + a + `"},"finish_reason":"stop","logprobs":{"content":[{"token":"` + a + `","logprob":-0.2,"top_logprobs":[]}]}},` +
			`{"index":1,"message":{"role":"assistant","content":"` + b + `"},"finish_reason":"stop","logprobs":{"content":[{"token":"` + b + `","logprob":-1.5,"top_logprobs":[]}]}}]}`
	}
	resp := filepath.Join(dir, "responses.jsonl")
	os.WriteFile(resp, []byte(chat("2", "3")+"\n"+chat("5", "5")+"\n"), 0o644)
	scored := filepath.Join(dir, "scored.jsonl")
	for _, reward := range []string{"binary", "confclip"} {
		if code := run(t, "score", "--data", resp, "--prompts", prompts, "--out", scored, "--reward", reward, "--verifier", "math"); code != 0 {
			t.Fatalf("score --reward %s: exit %d", reward, code)
		}
	}
	recs, _, _, err := dataset.ReadFile[dataset.Scored](scored, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[0].PromptID != "1" || !recs[0].VerifierResult.Correct || recs[1].VerifierResult.Correct || recs[3].Answer != "5" {
		t.Fatalf("scored %+v", recs)
	}
	if recs[0].Confidence <= recs[1].Confidence {
		t.Errorf("confidence %v vs %v: the server's log-probs were not used", recs[0].Confidence, recs[1].Confidence)
	}
	out := filepath.Join(dir, "train.jsonl")
	if code := run(t, "export", "--data", scored, "--out", out); code == 0 {
		t.Error("export of records without token ids succeeded")
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed export left its output")
	}
	if code := run(t, "score", "--data", resp, "--prompts", prompts, "--out", scored, "--reward", "binary", "--verifier", "math", "-m", model); code != 0 {
		t.Fatalf("score with the model: exit %d", code)
	}
	if code := run(t, "export", "--data", scored, "--out", out, "--format", "trl"); code != 0 {
		t.Fatalf("export after teacher forcing: exit %d", code)
	}
	rows, _, _, err := dataset.ReadFile[map[string]any](out, false)
	if err != nil || len(rows) != 4 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	if ids, _ := rows[0]["completion_ids"].([]any); len(ids) == 0 || rows[0]["completion"] != "2" {
		t.Errorf("row 0: %v", rows[0])
	}
}

// A trained GGUF adapter goes out as PEFT and back, and the imported one
// samples the same completions as the original.
func TestAdapterCommands(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tools.GenModel(tools.GenModelOptions{Out: model}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "p.jsonl")
	os.WriteFile(data, []byte(`{"prompt":"1+1=","solution":"2"}`+"\n"+`{"prompt":"2+2=","solution":"4"}`+"\n"), 0o644)
	ro, sc, ex := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "s.jsonl"), filepath.Join(dir, "t.jsonl")
	if code := run(t, "rollout", "-m", model, "--data", data, "--out", ro, "-G", "4", "-n", "4", "--no-timing"); code != 0 {
		t.Fatalf("rollout: exit %d", code)
	}
	// The first completion is the one right answer: the groups' rewards
	// differ, so the training step moves the adapter.
	base, _, _, err := dataset.ReadFile[dataset.Rollout](ro, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.toml")
	os.WriteFile(cfg, []byte("[verifier]\nname = \"format\"\npattern = '''^"+regexp.QuoteMeta(base[0].Text)+"$'''\n"), 0o644)
	for _, args := range [][]string{
		{"--config", cfg, "score", "--data", ro, "--out", sc, "--reward", "binary"},
		{"export", "--data", sc, "--out", ex},
		{"train", "-m", model, "--data", ex, "--adapter-out", filepath.Join(dir, "a.gguf"), "--lr", "0.05"},
		{"adapter", "export", "-m", model, "--adapter", filepath.Join(dir, "a.gguf"), "--peft", filepath.Join(dir, "peft")},
		{"adapter", "import", "-m", model, "--peft", filepath.Join(dir, "peft"), "--out", filepath.Join(dir, "b.gguf")},
		{"rollout", "-m", model, "--data", data, "--out", filepath.Join(dir, "r0.jsonl"), "-G", "2", "-n", "6", "--no-timing"},
		{"rollout", "-m", model, "--lora", filepath.Join(dir, "a.gguf"), "--data", data, "--out", filepath.Join(dir, "ra.jsonl"), "-G", "2", "-n", "6", "--no-timing"},
		{"rollout", "-m", model, "--lora", filepath.Join(dir, "b.gguf"), "--data", data, "--out", filepath.Join(dir, "rb.jsonl"), "-G", "2", "-n", "6", "--no-timing"},
	} {
		if code := run(t, args...); code != 0 {
			t.Fatalf("%s: exit %d", strings.Join(args, " "), code)
		}
	}
	r0, _, _, _ := dataset.ReadFile[dataset.Rollout](filepath.Join(dir, "r0.jsonl"), false)
	if len(r0) == 0 {
		t.Fatal("no base rollouts")
	}
	for _, f := range []string{"adapter_model.safetensors", "adapter_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, "peft", f)); err != nil {
			t.Error(err)
		}
	}
	ra, _, _, _ := dataset.ReadFile[dataset.Rollout](filepath.Join(dir, "ra.jsonl"), false)
	rb, _, _, _ := dataset.ReadFile[dataset.Rollout](filepath.Join(dir, "rb.jsonl"), false)
	if len(ra) != 4 || len(ra) != len(rb) {
		t.Fatalf("%d and %d rollouts", len(ra), len(rb))
	}
	moved := false
	for i := range ra {
		moved = moved || ra[i].Logprobs[0] != r0[i].Logprobs[0]
		if ra[i].Text != rb[i].Text || len(ra[i].Logprobs) != len(rb[i].Logprobs) {
			t.Fatalf("completion %d: %q with the original adapter, %q with the round-tripped one", i, ra[i].Text, rb[i].Text)
		}
		for k := range ra[i].Logprobs {
			if ra[i].Logprobs[k] != rb[i].Logprobs[k] {
				t.Errorf("completion %d token %d: log-prob %v vs %v", i, k, ra[i].Logprobs[k], rb[i].Logprobs[k])
			}
		}
	}
	if !moved {
		t.Error("the trained adapter did not change the log-probs: the round trip was not tested on a real change")
	}
}

// serverResponses are chat-completions responses to prompts.jsonl of the
// documentation's fixtures (n = 2, with log-probs), in prompt order, as an
// OpenAI-compatible server writes them.
func serverResponses() string {
	var b strings.Builder
	for i := range 4 {
		fmt.Fprintf(&b, `{"id":"chatcmpl-%d","object":"chat.completion","model":"M","choices":[`+
			`{"index":0,"message":{"role":"assistant","content":"%d"},"finish_reason":"stop","logprobs":{"content":[{"token":"%d","logprob":-0.3,"top_logprobs":[]}]}},`+
			`{"index":1,"message":{"role":"assistant","content":"x"},"finish_reason":"stop","logprobs":{"content":[{"token":"x","logprob":-2.1,"top_logprobs":[]}]}}]}`+"\n", i, i, i)
	}
	return b.String()
}
