package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
	"github.com/confclip/confclip/testkit/pipelinetest"
)

// experimentFixture is runFixture's model and data as a two-arm, one-seed
// experiment of one step with an evaluation before and after.
func experimentFixture(t *testing.T) File {
	t.Helper()
	cfg := File{Config: pipelinetest.RunFixture(t), Experiment: DefaultConfig()}
	cfg.Run.Steps, cfg.Run.EvalEvery = 1, 1
	cfg.Experiment.Arms = []string{"binary_grpo", "confclip_grpo"}
	cfg.Experiment.Seeds = []uint64{1}
	return cfg
}

// TestExperimentResultsJSON: a one-seed experiment writes a results.json
// that parses and holds every arm with its summary fields and its run's
// fields. One seed leaves the intervals undefined (NaN), which must come out
// as null, not as an empty file (json.MarshalIndent fails on NaN).
func TestExperimentResultsJSON(t *testing.T) {
	cfg := experimentFixture(t)
	if _, err := Experiment(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.Run.Out, "results.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Dir  string                       `json:"dir"`
		Arms []map[string]json.RawMessage `json:"arms"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("%s does not parse (%d bytes): %v", path, len(b), err)
	}
	if len(res.Arms) != 2 {
		t.Fatalf("%s: %d arms, want 2", path, len(res.Arms))
	}
	for i, a := range res.Arms {
		var name string
		if err := json.Unmarshal(a["arm"], &name); err != nil || name != cfg.Experiment.Arms[i] {
			t.Errorf("arm %d: name %s (%v), want %s", i, a["arm"], err, cfg.Experiment.Arms[i])
		}
		// Summary fields: a number, or null where one seed leaves them undefined.
		for _, f := range []string{"AccBefore", "AccAfter", "Gain", "TokensBefore", "TokensAfter", "Sampled", "ZeroStd", "ZeroStdBinary", "SecondsPerStep"} {
			var v float64
			if err := json.Unmarshal(a[f], &v); err != nil {
				t.Errorf("arm %s: %s = %s, want a number (%v)", name, f, a[f], err)
			}
		}
		for _, f := range []string{"AccAfterCI", "GainCI", "SampledCI"} {
			if string(a[f]) != "null" {
				t.Errorf("arm %s: %s = %s with one seed, want null", name, f, a[f])
			}
		}
		var seeds []map[string]any
		if err := json.Unmarshal(a["seeds"], &seeds); err != nil || len(seeds) != 1 {
			t.Fatalf("arm %s: seeds %s (%v), want one", name, a["seeds"], err)
		}
		for _, f := range []string{"seed", "dir", "held_out_accuracy_before", "held_out_accuracy_after", "fixed", "broken", "mcnemar_p", "zero_std_frac", "sampled_tokens"} {
			if _, ok := seeds[0][f]; !ok {
				t.Errorf("arm %s seed 1: no %q in %v", name, f, seeds[0])
			}
		}
		if acc, ok := seeds[0]["held_out_accuracy_after"].(float64); !ok || acc < 0 || acc > 1 {
			t.Errorf("arm %s: held-out accuracy after %v, want a number in [0, 1]", name, seeds[0]["held_out_accuracy_after"])
		}
		// the calibration comes from the evaluations' scored records (the
		// metrics rows hold only accuracy and length)
		for _, f := range []string{"held_out_ece_before", "held_out_ece_after", "held_out_brier_before", "held_out_brier_after", "held_out_stated_after"} {
			if v, ok := seeds[0][f].(float64); !ok || v < 0 || v > 1 {
				t.Errorf("arm %s seed 1: %s = %v, want a number in [0, 1]", name, f, seeds[0][f])
			}
		}
	}
}

// TestExperimentStarts: experiment.starts runs the grid from a pre-training
// seed (pre-trained once, then taken from the cache while its settings hold)
// and from a model path, in one folder per start; the results carry the
// start, pair the arms by start and seed, and split the spread between
// starts and seeds.
func TestExperimentStarts(t *testing.T) {
	cfg := experimentFixture(t)
	dir := filepath.Dir(cfg.Run.Out)
	corpus := filepath.Join(dir, "corpus.txt")
	var texts []string
	for i := range 20 {
		texts = append(texts, "Say "+string(rune('0'+i%10))+": abc")
	}
	if err := os.WriteFile(corpus, []byte(strings.Join(texts, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Experiment.Starts = []Start{{Seed: 7}, {Path: cfg.Model.Path}}
	cfg.Experiment.Corpus = corpus
	cfg.Experiment.PretrainSteps, cfg.Experiment.PretrainBatch = 3, 4
	cfg.Experiment.Seeds = []uint64{1, 2}
	var notes []string
	progress := func(e pipeline.Event) {
		if n, ok := e.(pipeline.RunNote); ok {
			notes = append(notes, n.Text)
		}
	}
	res, err := Experiment(context.Background(), cfg, progress)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(cfg.Run.Out, "starts", "pretrain-seed-7.gguf")
	st, err := os.Stat(model)
	if err != nil {
		t.Fatalf("pre-trained start: %v", err)
	}
	for _, start := range []string{"pretrain-seed-7", "tiny"} {
		for _, arm := range cfg.Experiment.Arms {
			for _, seed := range []string{"seed-1", "seed-2"} {
				if _, err := os.Stat(filepath.Join(cfg.Run.Out, start, arm, seed, pipeline.RunConfigFile)); err != nil {
					t.Errorf("run folder of %s %s %s: %v", start, arm, seed, err)
				}
			}
		}
	}
	got := map[string]int{}
	for _, s := range res.Arms[0].Seeds {
		got[s.Start]++
	}
	if len(res.Arms[0].Seeds) != 4 || got["pretrain-seed-7"] != 2 || got["tiny"] != 2 {
		t.Errorf("runs by start %v, want 2 each of pretrain-seed-7 and tiny", got)
	}
	recorded, err := pipeline.LoadConfig(filepath.Join(cfg.Run.Out, "pretrain-seed-7", "binary_grpo", "seed-1", pipeline.RunConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if recorded.Model.Path != model {
		t.Errorf("run of start pretrain-seed-7 used model %s, want %s", recorded.Model.Path, model)
	}
	for _, want := range []string{"paired by start and seed", "| pretrain-seed-7 | 1 |", "| tiny | 2 |", "sd between starts", "4 runs (2 starts × 2 seeds)"} {
		if !strings.Contains(res.Table, want) {
			t.Errorf("table lacks %q:\n%s", want, res.Table)
		}
	}
	b, err := os.ReadFile(filepath.Join(cfg.Run.Out, "results.json"))
	if err == nil && !strings.Contains(string(b), `"start": "pretrain-seed-7"`) {
		t.Errorf("results.json does not carry the start:\n%.2000s", b)
	}

	// Again: the start comes from the cache (same file, a note says so),
	// and every run is resumed finished.
	time.Sleep(10 * time.Millisecond)
	notes = nil
	if _, err := Experiment(context.Background(), cfg, progress); err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(model)
	if err != nil || !st2.ModTime().Equal(st.ModTime()) || !strings.Contains(strings.Join(notes, "\n"), "(cached)") {
		t.Errorf("second experiment: model %v → %v (%v), notes %q: want the cached start", st.ModTime(), st2, err, notes)
	}
	// Another pre-training setting trains the start again.
	cfg.Experiment.PretrainSteps = 4
	cfg.Run.Out += "-b"
	notes = nil
	if _, err := Experiment(context.Background(), cfg, progress); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(notes, "\n"), "pre-training on") {
		t.Errorf("changed pretrain_steps: notes %q, want a pre-training", notes)
	}
}

// TestStartsConfig: experiment.starts takes integers (pre-training seeds)
// and strings (model paths) in one list; other values, a seed start
// without a corpus and two starts with one folder name are errors that name
// the key.
func TestStartsConfig(t *testing.T) {
	dir := t.TempDir()
	load := func(body string) (File, error) {
		path := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadFile(path)
	}
	cfg, err := load("[experiment]\nstarts = [3, \"models/a.gguf\"]\ncorpus = \"c.txt\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Start{{Seed: 3}, {Path: "models/a.gguf"}}
	if len(cfg.Experiment.Starts) != 2 || cfg.Experiment.Starts[0] != want[0] || cfg.Experiment.Starts[1] != want[1] {
		t.Fatalf("starts %+v, want %+v", cfg.Experiment.Starts, want)
	}
	if err := checkStarts(cfg.Experiment); err != nil {
		t.Errorf("valid starts: %v", err)
	}
	for _, tc := range []struct{ body, want string }{
		{"[experiment]\nstarts = [1.5]\n", "starts"},
		{"[experiment]\nstarts = [-2]\n", "pre-training seed"},
		{"[experiment]\nstarts = [\"\"]\n", "model path"},
	} {
		if _, err := load(tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error mentioning %q", tc.body, err, tc.want)
		}
	}
	for _, tc := range []struct {
		e    Config
		want string
	}{
		{Config{Starts: []Start{{Seed: 1}}, PretrainSteps: 1, PretrainBatch: 1, PretrainLR: 1e-3}, "experiment.corpus"},
		{Config{Starts: []Start{{Path: "a/m.gguf"}, {Path: "b/m.gguf"}}}, "same name \"m\""},
		{Config{Starts: []Start{{Seed: 1}}, Corpus: "c", PretrainSteps: 0, PretrainBatch: 1, PretrainLR: 1e-3}, "pretrain_steps"},
		{Config{Starts: []Start{{Seed: 1}}, Corpus: "c", PretrainSteps: 1, PretrainBatch: 1, PretrainLR: math.NaN()}, "pretrain_lr"},
	} {
		if err := checkStarts(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error mentioning %q", tc.e, err, tc.want)
		}
	}
	// A start's value as the run folder records it reads back the same.
	b, err := Start{Path: "x \"y\".gguf"}.MarshalTOML()
	if err != nil || string(b) != `"x \"y\".gguf"` {
		t.Errorf("MarshalTOML: %s, %v", b, err)
	}
}

// TestVarComponents: two starts of two seeds each, {1, 3} and {5, 7}: the
// variance within a start is 2, the variance of the start means 8, so the
// starts' component is 8 − 2/2 = 7.
func TestVarComponents(t *testing.T) {
	m, st, se := reporting.VarComponents(map[string][]float64{"a": {1, 3}, "b": {5, 7}})
	if m != 4 || math.Abs(st-math.Sqrt(7)) > 1e-12 || math.Abs(se-math.Sqrt(2)) > 1e-12 {
		t.Errorf("mean %g, sd starts %g, sd seeds %g; want 4, √7, √2", m, st, se)
	}
	// Starts that differ less than their seeds' noise predicts: component 0.
	if _, st, _ := reporting.VarComponents(map[string][]float64{"a": {0, 10}, "b": {1, 9}}); st != 0 {
		t.Errorf("sd between starts %g, want 0", st)
	}
	if _, st, se := reporting.VarComponents(map[string][]float64{"a": {1, 2}}); !math.IsNaN(st) || math.Abs(se-math.Sqrt(0.5)) > 1e-12 {
		t.Errorf("one start: sd starts %g (want NaN), seeds %g", st, se)
	}
}

// TestExperimentExamples: the demo's configuration and the experiments of
// docs/experiment.md load and validate, and the start × seed experiment
// runs the demo's RL settings from pre-training seeds with the demo's
// pre-training settings (make demo: --steps 800 --batch 16 --lr 3e-3).
func TestExperimentExamples(t *testing.T) {
	load := func(name string) File {
		cfg, err := LoadFile(filepath.Join("..", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return cfg
	}
	demo := load("demo.toml")
	load("experiment.toml")
	starts := load("experiment-starts.toml")
	if demo.Run.Steps != starts.Run.Steps || demo.Run.PromptsPerStep != starts.Run.PromptsPerStep || demo.Train.LR != starts.Train.LR || demo.Train.Schedule != starts.Train.Schedule {
		t.Errorf("experiment-starts.toml runs %d steps of %d prompts, lr %g %s; the demo %d of %d, lr %g %s",
			starts.Run.Steps, starts.Run.PromptsPerStep, starts.Train.LR, starts.Train.Schedule, demo.Run.Steps, demo.Run.PromptsPerStep, demo.Train.LR, demo.Train.Schedule)
	}
	e := starts.Experiment
	if len(e.Starts) < 4 || len(e.Seeds) < 4 || e.PretrainSteps != 800 || e.PretrainBatch != 16 || e.PretrainLR != 3e-3 {
		t.Errorf("experiment-starts.toml: %d starts × %d seeds, pre-training %d steps of %d, lr %g; want at least 4 × 4 with the demo's 800, 16, 3e-3",
			len(e.Starts), len(e.Seeds), e.PretrainSteps, e.PretrainBatch, e.PretrainLR)
	}
	for _, s := range e.Starts {
		if s.Path != "" {
			t.Errorf("experiment-starts.toml: start %q, want pre-training seeds", s.Path)
		}
	}
}

// TestShippedConfigsValidate: the example configurations load and pass
// Validate (a check that rejected them would be wrong, or they would be).
func TestShippedConfigsValidate(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "examples", "*.toml"))
	files = append(files, filepath.Join("..", "docs", "example.toml"))
	for _, f := range files {
		cfg, err := LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestValidateGrid: an unknown arm and a bad start are refused by the
// file's Validate, each naming its key, beside a problem of a run table;
// the defaults pass.
func TestValidateGrid(t *testing.T) {
	if err := DefaultFile().Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	f := DefaultFile()
	f.Experiment.Arms = []string{"binary_grpo", "binary_grp"}
	f.Experiment.Starts = []Start{{Seed: 1}}
	f.Train.LR = math.NaN()
	err := f.Validate()
	for _, want := range []string{`experiment.arms: unknown arm "binary_grp", did you mean "binary_grpo"?`, "experiment.corpus", "train.lr: NaN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want an error containing %q", err, want)
		}
	}
	// The experiment refuses the grid before it runs anything.
	f = DefaultFile()
	f.Experiment.Arms = []string{"binary_grp"}
	f.Run.Out = filepath.Join(t.TempDir(), "exp")
	if _, err := Experiment(context.Background(), f, nil); err == nil || !strings.Contains(err.Error(), "experiment.arms") {
		t.Errorf("Experiment with an unknown arm: %v", err)
	}
	if _, err := os.Stat(f.Run.Out); !os.IsNotExist(err) {
		t.Errorf("the experiment folder was made (%v)", err)
	}
}

// TestLoadFileUnknownKey: a key neither a run table nor [experiment] has
// names itself and the nearest key; a run's own loader does not take
// [experiment] (pipeline.LoadConfig reads a run's tables only).
func TestLoadFileUnknownKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[experiment]\narm = [\"binary_grpo\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), `unknown key experiment.arm, did you mean "experiment.arms"?`) || !errors.Is(err, pipeline.ErrConfig) {
		t.Errorf("LoadFile: %v, want the unknown key and its nearest", err)
	}
	if err := os.WriteFile(path, []byte("[experiment]\narms = [\"binary_grpo\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Errorf("LoadFile: %v", err)
	}
	if _, err := pipeline.LoadConfig(path); err == nil || !strings.Contains(err.Error(), "experiment.arms") {
		t.Errorf("pipeline.LoadConfig: %v, want experiment.arms unknown", err)
	}
}
