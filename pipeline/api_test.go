package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/testkit/testutil"
)

// apiFixture is testutil.StageFixture, loaded as a user's config is.
func apiFixture(t *testing.T, lines ...string) (Config, string) {
	t.Helper()
	path, data := testutil.StageFixture(t, lines...)
	return loadFixture(t, path), data
}

func openModel(t *testing.T, cfg Config) *Model {
	t.Helper()
	m, err := OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestRolloutResumeChecksProvenance: bad ids are listed with their lines, a
// second call resumes (nothing to do), a call with another option refuses
// naming it, Restart starts over.
func TestRolloutResumeChecksProvenance(t *testing.T) {
	cfg, data := apiFixture(t,
		`{"id":"a","prompt":"Say 1:","answer":"x"}`,
		`{"prompt":"no id","answer":"x"}`, // gets an id from its line
		`{"id":"b","prompt":"Say 2:","answer":"x"}`,
		`{"id":"a","prompt":"again","answer":"x"}`,
		`{"id":"c","prompt":"`+strings.Repeat("Say 1 2 3 ", 200)+`","answer":"x"}`, // longer than the context
	)
	m := openModel(t, cfg)
	out := filepath.Join(t.TempDir(), "rollouts.jsonl")
	var events int
	o := RolloutOptions{Config: cfg, In: data, Out: out, NoTiming: true, Progress: func(Event) { events++ }}
	ctx := context.Background()
	res, err := Rollout(ctx, m, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups != 3 || res.Records != 9 || events != 3 {
		t.Fatalf("groups %d records %d events %d, want 3, 9, 3 (failed %v)", res.Groups, res.Records, events, res.Failed)
	}
	var lines []int
	for _, f := range res.Failed {
		lines = append(lines, f.Line)
	}
	if want := []int{4, 5}; !equalInts(lines, want) {
		t.Fatalf("failed prompts at lines %v (%v), want %v", lines, res.Failed, want)
	}
	first, _ := os.ReadFile(out)

	res, err = Rollout(ctx, m, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups != 0 || res.AlreadyDone != 3 || res.FileGroups != 3 {
		t.Fatalf("resume of a complete file: %d groups written, %d done, %d in the file", res.Groups, res.AlreadyDone, res.FileGroups)
	}
	// A group cut by a crash is dropped and made again, the same.
	cut := bytes.Join(bytes.SplitAfter(first, []byte("\n"))[:4], nil)
	os.WriteFile(out, append(cut, `{"prompt_id":"b","sam`...), 0o644)
	if res, err = Rollout(ctx, m, o); err != nil || res.Groups != 2 {
		t.Fatalf("resume after a cut: %d groups, %v", res.Groups, err)
	}
	// The same completions (groups may finish in another order, and the
	// log-probs move by rounding with what else is in the batch).
	again, _ := os.ReadFile(out)
	sameRollouts(t, first, again)

	o2 := o
	o2.Config.Rollout.Temperature = 0.5
	if _, err := Rollout(ctx, m, o2); err == nil || !strings.Contains(err.Error(), "temperature: 1 in the file, 0.5 now") {
		t.Fatalf("resume with another temperature: %v", err)
	}
	o2.Restart = true
	if res, err = Rollout(ctx, m, o2); err != nil || res.Groups != 3 || res.AlreadyDone != 0 {
		t.Fatalf("restart: %d groups, %v", res.Groups, err)
	}
	var prov dataset.RolloutProvenance
	b, err := os.ReadFile(dataset.ProvenancePath(out))
	if err != nil || json.Unmarshal(b, &prov) != nil || prov.Settings.Temperature != 0.5 || len(prov.ModelSHA256) != 64 {
		t.Fatalf("provenance after restart: %s %v", b, err)
	}
	// A file without provenance is not resumed.
	os.Remove(dataset.ProvenancePath(out))
	o2.Restart = false
	if _, err := Rollout(ctx, m, o2); err == nil || !strings.Contains(err.Error(), "--restart") {
		t.Fatalf("resume without provenance: %v", err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEvaluateCountsFailedPrompts: a prompt that cannot be generated counts
// as wrong and is listed; undefined metrics are null; every JSON field is
// there; the JUnit report has one case per prompt.
func TestEvaluateCountsFailedPrompts(t *testing.T) {
	cfg, data := apiFixture(t,
		`{"id":"a","prompt":"Say 1:","answer":"x"}`,
		`{"id":"b","prompt":"Say 2:","answer":"x"}`,
		`{"id":"long","prompt":"`+strings.Repeat("Say 1 2 3 ", 40)+`","answer":"x"}`, // does not fit the context
		`{"id":"c","prompt":"Say 3:","answer":"x"}`,
	)
	m := openModel(t, cfg)
	res, err := Evaluate(context.Background(), m, EvalOptions{Config: cfg, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if res.Prompts != 4 || res.Correct != 3 || res.Failed != 1 || res.Accuracy != 0.75 {
		t.Fatalf("prompts %d correct %d failed %d accuracy %v, want 4, 3, 1, 0.75", res.Prompts, res.Correct, res.Failed, res.Accuracy)
	}
	if c := res.Cases[2]; c.ID != "long" || c.Line != 3 || c.Error == "" || c.Correct {
		t.Fatalf("the long prompt's case: %+v", c)
	}
	if res.AUROC != nil || res.PassAtK != nil || res.ECE == nil {
		t.Fatalf("AUROC of an all-right set must be null, pass@K without samples null, ECE defined: %v %v %v", res.AUROC, res.PassAtK, res.ECE)
	}
	b, _ := json.Marshal(res)
	var fields map[string]any
	json.Unmarshal(b, &fields)
	for _, k := range []string{"prompts", "correct", "accuracy", "failed", "mean_tokens", "samples", "sampled_accuracy", "pass_at_k", "ece", "brier", "auroc", "cases"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, b)
		}
	}

	// With samples: pass@K is defined.
	res, err = Evaluate(context.Background(), m, EvalOptions{Config: cfg, Data: data, Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.PassAtK == nil || *res.PassAtK != 0.75 || res.Samples != 2 {
		t.Fatalf("pass@2 %v, samples %d: want 0.75 (the failed prompt counts), 2", res.PassAtK, res.Samples)
	}
}

// TestRunFolderLifecycle: a config naming a missing file leaves no folder;
// a folder left by a failed start is taken over; a finished run runs
// further with more steps.
func TestRunFolderLifecycle(t *testing.T) {
	cfg := runFixture(t)
	cfg.Run.Steps = 1
	cfg.Run.EvalEvery = 0
	ctx := context.Background()
	bad := cfg
	bad.Model.Path += ".missing"
	if _, err := Run(ctx, RunOptions{Config: bad}); err == nil || !strings.Contains(err.Error(), "model.path") {
		t.Fatalf("missing model: %v", err)
	}
	if _, err := os.Stat(cfg.Run.Out); err == nil {
		t.Fatal("a run with a missing model left its folder")
	}
	// What a start that failed after making its folder leaves.
	os.MkdirAll(cfg.Run.Out, 0o755)
	os.WriteFile(filepath.Join(cfg.Run.Out, RunConfigFile), []byte("[rollout]\ngroup = 3\n"), 0o644)
	res, err := Run(ctx, RunOptions{Config: cfg})
	if err != nil {
		t.Fatalf("fresh start over a folder without results: %v", err)
	}
	if n := len(res.Rows); n == 0 || res.Rows[n-1].Step != 1 {
		t.Fatalf("rows after one step: %+v", res.Rows)
	}
	cfg.Run.Steps = 2
	res, err = Run(ctx, RunOptions{Config: cfg, Resume: true})
	if err != nil {
		t.Fatalf("extending a finished run: %v", err)
	}
	if n := len(res.Rows); res.Resumed != 1 || res.Rows[n-1].Step != 2 || res.Rows[n-2].Step != 1 {
		t.Fatalf("extended run: resumed from %d, rows %d", res.Resumed, len(res.Rows))
	}
	cfg.Rollout.Group = 3
	if _, err := Run(ctx, RunOptions{Config: cfg, Resume: true}); err == nil || !strings.Contains(err.Error(), "rollout.group") {
		t.Fatalf("resume with another group: %v", err)
	}
}

func sameRollouts(t *testing.T, a, b []byte) {
	t.Helper()
	read := func(x []byte) map[string]dataset.Rollout {
		m := map[string]dataset.Rollout{}
		for _, line := range bytes.Split(bytes.TrimSpace(x), []byte("\n")) {
			var r dataset.Rollout
			if err := json.Unmarshal(line, &r); err != nil {
				t.Fatal(err)
			}
			m[fmt.Sprintf("%s/%d", r.PromptID, r.Sample)] = r
		}
		return m
	}
	ra, rb := read(a), read(b)
	if len(ra) != len(rb) {
		t.Fatalf("%d records, then %d", len(ra), len(rb))
	}
	for k, x := range ra {
		y, ok := rb[k]
		if !ok || x.Text != y.Text || !slices.Equal(x.Tokens, y.Tokens) {
			t.Fatalf("%s: %q %v, then %q %v", k, x.Text, x.Tokens, y.Text, y.Tokens)
		}
		for i := range x.Logprobs {
			if math.Abs(x.Logprobs[i]-y.Logprobs[i]) > 1e-4 {
				t.Fatalf("%s token %d: log-prob %v, then %v", k, i, x.Logprobs[i], y.Logprobs[i])
			}
		}
	}
}

// TestTopPZeroIsGreedy: top_p = 0 keeps only the most likely token, as in
// llama.cpp (the sampler's own 0 means off).
func TestTopPZeroIsGreedy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rollout.TopP = 0
	if s := EngineOptions(cfg).Params; s.TopK != 1 || s.TopP != 1 {
		t.Fatalf("top_p 0: sampler %+v, want top_k 1", s)
	}
	cfg.Rollout.TopP = 0.9
	if s := EngineOptions(cfg).Params; s.TopK != 0 || s.TopP != 0.9 {
		t.Fatalf("top_p 0.9: sampler %+v", s)
	}
}

// TestExportsKeepUserFields: a verl prompt's data_source and extra_info, a
// confclip prompt's unknown fields and a conversational prompt's messages go
// from the prompt file through rollout and score into the exports, and the
// export's provenance is the rollout's when no model is given.
func TestExportsKeepUserFields(t *testing.T) {
	cfg, data := apiFixture(t,
		`{"prompt":[{"role":"user","content":"Say 1:"}],"reward_model":{"ground_truth":"x"},"data_source":"my/wordprobs","extra_info":{"index":7,"split":"train"}}`,
	)
	cfg.Model.ChatTemplate = "chatml"
	m := openModel(t, cfg)
	dir := t.TempDir()
	rolls, scored := filepath.Join(dir, "rollouts.jsonl"), filepath.Join(dir, "scored.jsonl")
	ctx := context.Background()
	res, err := Rollout(ctx, m, RolloutOptions{Config: cfg, In: data, Out: rolls, NoTiming: true})
	if err != nil {
		t.Fatal(err)
	}
	so := NewScoreOptions(cfg, rolls, scored)
	so.Reward.Method = "binary"
	if _, err := Score(ctx, so); err != nil {
		t.Fatal(err)
	}
	verl, trl := filepath.Join(dir, "verl.jsonl"), filepath.Join(dir, "trl.jsonl")
	for _, o := range []ExportOptions{{In: scored, Out: verl, Layout: dataset.LayoutVerl}, {In: scored, Out: trl, Layout: dataset.LayoutTRL}} {
		sum, err := Export(o)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Provenance.ModelSHA256 == "" || sum.Provenance.ModelSHA256 != res.Provenance.ModelSHA256 {
			t.Errorf("%s: provenance model %q, the rollout's %q", o.Layout, sum.Provenance.ModelSHA256, res.Provenance.ModelSHA256)
		}
	}
	v := readRows(t, verl)[0]
	if v["data_source"] != "my/wordprobs" || fmt.Sprint(v["extra_info"]) != "map[index:7 split:train]" {
		t.Errorf("verl row: data_source %v, extra_info %v", v["data_source"], v["extra_info"])
	}
	p, ok := readRows(t, trl)[0]["prompt"].([]any)
	if !ok || len(p) != 1 || fmt.Sprint(p[0]) != "map[content:Say 1: role:user]" {
		t.Errorf("TRL prompt: %#v, want the messages given", readRows(t, trl)[0]["prompt"])
	}
}
