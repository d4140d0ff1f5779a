package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
			_, err := Score(context.Background(), ScoreOptions{In: data, Out: data})
			return err
		},
		"verify --out IN": func() error {
			_, err := VerifyFile(context.Background(), VerifyFileOptions{In: data, Out: data})
			return err
		},
		"merge --out IN": func() error {
			_, err := MergeRollouts([]string{data}, data)
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
