package pipeline

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/scoring"
)

// TestOutputIsNotInput: issue 23's typos. An output that names an input
// file (or a link to it) is refused before anything is read or written,
// and the input is left as it was.
func TestOutputIsNotInput(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "S.jsonl")
	const content = `{"prompt_id":"p","text":"x"}` + "\n"
	os.WriteFile(data, []byte(content), 0o644)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(data, link)
	model := filepath.Join(dir, "m.gguf")
	os.WriteFile(model, []byte("GGUF"), 0o644)
	cfg := Config{Model: ModelConfig{Path: model}}
	cases := map[string]func() error{
		"train --data X --adapter-out X": func() error {
			_, err := Train(context.Background(), TrainOptions{Config: cfg, Data: data, AdapterOut: data, Steps: 1})
			return err
		},
		"train --adapter-out MODEL": func() error {
			_, err := Train(context.Background(), TrainOptions{Config: cfg, Data: data, AdapterOut: model, Steps: 1})
			return err
		},
		"export --data S --out S": func() error {
			_, err := Export(ExportOptions{In: data, Out: data})
			return err
		},
		"export through a link": func() error {
			_, err := Export(ExportOptions{In: data, Out: link})
			return err
		},
		"score --out IN": func() error {
			_, err := Score(context.Background(), ScoreOptions{Options: scoring.Options{In: data, Out: data}})
			return err
		},
	}
	for name, run := range cases {
		err := run()
		if err == nil || !strings.Contains(err.Error(), "the output is the input") {
			t.Errorf("%s: got %v, want the output refused", name, err)
		}
		if b, _ := os.ReadFile(data); string(b) != content {
			t.Fatalf("%s: the input now holds %q", name, b)
		}
		if b, _ := os.ReadFile(model); string(b) != "GGUF" {
			t.Fatalf("%s: the model now holds %q", name, b)
		}
	}
}

// TestNumbersChecked: issue 23's numbers, given to the pipeline functions
// the commands call (flags and config keys land in the same Config), are
// refused before anything is loaded, each naming its key.
func TestNumbersChecked(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.jsonl")
	os.WriteFile(data, []byte("{}\n"), 0o644)
	out := filepath.Join(dir, "out")
	base := DefaultConfig()
	base.Model.Path = filepath.Join(dir, "m.gguf")
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	nan := math.NaN()
	cases := []struct {
		name, want string
		run        func() error
	}{
		{"train --lr NaN", "train.lr", func() error {
			_, err := Train(context.Background(), TrainOptions{Config: with(func(c *Config) { c.Train.LR = nan }), Data: data, AdapterOut: out, Steps: 1})
			return err
		}},
		{"train --lora-rank 100000", "train.lora_rank", func() error {
			_, err := Train(context.Background(), TrainOptions{Config: with(func(c *Config) { c.Train.LoraRank = 100000 }), Data: data, AdapterOut: out, Steps: 1})
			return err
		}},
		{"train --steps 0", "steps = 0", func() error {
			_, err := Train(context.Background(), TrainOptions{Config: base, Data: data, AdapterOut: out, Steps: 0})
			return err
		}},
		{"rollout --temp NaN", "rollout.temperature", func() error {
			_, err := Rollout(context.Background(), nil, RolloutOptions{Config: with(func(c *Config) { c.Rollout.Temperature = nan }), In: data, Out: out})
			return err
		}},
		{"rollout -G 1000000", "rollout.group", func() error {
			_, err := Rollout(context.Background(), nil, RolloutOptions{Config: with(func(c *Config) { c.Rollout.Group = 1000000 }), In: data, Out: out})
			return err
		}},
	}
	for _, c := range cases {
		if err := c.run(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", c.name, out)
		}
	}
}

// TestLongTrainingSequenceRefused: issue 23's 8,606-token training
// sequence took 5 GB for a 186K-parameter model. A sequence longer than
// model.ctx is refused, naming its record, before the model is loaded.
func TestLongTrainingSequenceRefused(t *testing.T) {
	dir := t.TempDir()
	ids := make([]int32, 8606)
	for i := range ids {
		ids[i] = int32(3 + i%100)
	}
	rec, _ := json.Marshal(map[string]any{"prompt_id": "long", "sample": 0, "prompt_ids": ids[:6], "completion_ids": ids[6:], "advantage": 1.0})
	data := filepath.Join(dir, "train.jsonl")
	os.WriteFile(data, append(rec, '\n'), 0o644)
	cfg := DefaultConfig()
	cfg.Model.Path = filepath.Join(dir, "no-model.gguf") // never opened
	_, err := Train(context.Background(), TrainOptions{Config: cfg, Data: data, AdapterOut: filepath.Join(dir, "a.gguf"), Steps: 1})
	if err == nil || !strings.Contains(err.Error(), `record 1 (prompt_id "long"`) || !strings.Contains(err.Error(), "8606 tokens, longer than model.ctx = 2048") {
		t.Fatalf("got %v, want the long sequence refused", err)
	}
}
