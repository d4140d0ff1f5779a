package pipeline

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/modelgen"
	"github.com/confclip/confclip/train"
)

// TestTrainChecksColumnsAgainstTokens: completion_mask, advantages and
// old_logprobs must match the completion's tokens; train used to ignore
// them (a mask of the wrong length, or one that drops tokens, trained on
// everything).
func TestTrainChecksColumnsAgainstTokens(t *testing.T) {
	ok := func() dataset.TrainExample {
		return dataset.TrainExample{PromptID: "p", Sample: 1, PromptIDs: []int32{1, 2}, CompletionIDs: []int32{3, 4, 5},
			CompletionMask: []int32{1, 1, 1}, Advantage: 0.5, Advantages: []float64{0.5, 0.5, 0.5}, OldLogprobs: []float64{-1, -2, -3}}
	}
	cases := []struct {
		name   string
		change func(r *dataset.TrainExample)
		want   string
	}{
		{"short mask", func(r *dataset.TrainExample) { r.CompletionMask = []int32{1, 1} }, "completion_mask has 2 entries for 3 completion tokens"},
		{"long advantages", func(r *dataset.TrainExample) { r.Advantages = []float64{0.5, 0.5, 0.5, 0.5} }, "advantages has 4 entries for 3 completion tokens"},
		{"mask value 2", func(r *dataset.TrainExample) { r.CompletionMask = []int32{1, 2, 1} }, "completion_mask[1] = 2"},
		{"advantages differ", func(r *dataset.TrainExample) { r.Advantages = []float64{0.5, 0.7, 0.5} }, "advantages[1] = 0.7 differs"},
		{"old logprobs short", func(r *dataset.TrainExample) { r.OldLogprobs = []float64{-1} }, "old_logprobs has 1 entries"},
		{"positive old logprob", func(r *dataset.TrainExample) { r.OldLogprobs = []float64{-1, 0.5, -1} }, "old_logprobs[1] = 0.5"},
		{"no completion", func(r *dataset.TrainExample) {
			r.CompletionIDs, r.CompletionMask, r.Advantages, r.OldLogprobs = nil, nil, nil, nil
		}, "no completion_ids"},
	}
	if err := CheckTrainExamples("x.jsonl", []dataset.TrainExample{ok()}); err != nil {
		t.Fatalf("a good record: %v", err)
	}
	masked := ok()
	masked.CompletionMask = []int32{0, 0, 0}
	if err := CheckTrainExamples("x.jsonl", []dataset.TrainExample{masked}); err != nil {
		t.Fatalf("a masked record: %v", err)
	}
	// NaN cannot be written in JSON, only in Parquet: checked directly.
	nan := ok()
	nan.Advantage, nan.Advantages = math.NaN(), nil
	if err := CheckTrainExamples("x.parquet", []dataset.TrainExample{nan}); err == nil || !strings.Contains(err.Error(), "advantage NaN") {
		t.Fatalf("a NaN advantage: %v", err)
	}
	if exs := Examples([]dataset.TrainExample{masked, ok()}); !exs[0].Masked || exs[1].Masked || exs[1].Mask != nil {
		t.Fatalf("the all-zero mask is not used: %+v", exs)
	}
	partial := ok()
	partial.CompletionMask = []int32{1, 0, 1}
	if err := CheckTrainExamples("x.jsonl", []dataset.TrainExample{partial}); err != nil {
		t.Fatalf("a record whose mask keeps 2 of 3 tokens: %v", err)
	}
	if exs := Examples([]dataset.TrainExample{partial}); exs[0].Masked || !slices.Equal(exs[0].Mask, []bool{true, false, true}) {
		t.Fatalf("the partial mask is not used: %+v", exs[0])
	}
	for _, tc := range cases {
		dir := t.TempDir()
		path := filepath.Join(dir, "train.jsonl")
		bad := ok()
		tc.change(&bad)
		w, err := dataset.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		good := ok()
		good.Sample = 0
		w.Write(good)
		w.Write(bad)
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Model.Path = filepath.Join(dir, "never-loaded.gguf")
		_, err = Train(context.Background(), TrainOptions{Config: cfg, Data: path, AdapterOut: filepath.Join(dir, "out.gguf"), Steps: 1})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path+": record 2 (prompt \"p\" sample 1)") {
			t.Errorf("%s: got %v, want %q naming record 2", tc.name, err, tc.want)
		}
	}
}

// TestTrainReportsMemory: `confclip train`'s summary gives the micro-batch
// it used (sized from the model by default), the training activations and
// the process's peak memory, which holds them.
func TestTrainReportsMemory(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(model, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "train.jsonl")
	w, err := dataset.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		w.Write(dataset.TrainExample{PromptID: "p", Sample: i, PromptIDs: []int32{1, 5, 6}, CompletionIDs: []int32{7, 8, int32(9 + i)}, Advantage: float64(i) - 1.5})
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Model.Path = model
	sum, err := Train(context.Background(), TrainOptions{Config: cfg, Data: path, AdapterOut: filepath.Join(dir, "out.gguf"), Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := llama.LoadModel(model, llama.ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if want := train.AutoMicroBatch(train.ModelShape(m), train.MemoryBudget(m, 0).Bytes); sum.MicroBatch != want {
		t.Errorf("micro-batch %d, want %d (sized from the model)", sum.MicroBatch, want)
	}
	if sum.ComputeBufferBytes <= 0 || sum.PeakRSSBytes < sum.ComputeBufferBytes {
		t.Errorf("activations %d bytes, peak memory %d bytes", sum.ComputeBufferBytes, sum.PeakRSSBytes)
	}
}

// TestTrainTemperatureLeavesOldLogprobs: at train.temperature 0.5 an
// export's old_logprobs (the sampler's, at temperature 1) are not used,
// and train says so: the adapter is the one trained from the same records
// without them. At temperature 1 they are used (the adapter differs).
func TestTrainTemperatureLeavesOldLogprobs(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := modelgen.Write(model, modelgen.Tiny()); err != nil {
		t.Fatal(err)
	}
	write := func(name string, old bool) string {
		path := filepath.Join(dir, name)
		w, err := dataset.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			r := dataset.TrainExample{PromptID: "p", Sample: i, PromptIDs: []int32{1, 5, 6}, CompletionIDs: []int32{7, 8, int32(9 + i)}, Advantage: float64(i) - 1.5}
			if old {
				r.OldLogprobs = []float64{-1, -2, -0.5}
			}
			w.Write(r)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	withOld, without := write("old.jsonl", true), write("plain.jsonl", false)
	adapter := func(data string, temp float64) (string, []string) {
		cfg := DefaultConfig()
		cfg.Model.Path = model
		cfg.Train.Temperature = temp
		out := filepath.Join(dir, fmt.Sprintf("%s-%g.gguf", filepath.Base(data), temp))
		var notes []string
		if _, err := Train(context.Background(), TrainOptions{Config: cfg, Data: data, AdapterOut: out, Steps: 2,
			Note: func(s string) { notes = append(notes, s) }}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), notes
	}
	a, notes := adapter(withOld, 0.5)
	b, _ := adapter(without, 0.5)
	if a != b {
		t.Error("at temperature 0.5 the old log-probs changed the adapter")
	}
	if !slices.ContainsFunc(notes, func(s string) bool { return strings.Contains(s, "old log-probs are at temperature 1 and are not used") }) {
		t.Errorf("no note that the old log-probs are not used: %q", notes)
	}
	c, notes1 := adapter(withOld, 1)
	d, _ := adapter(without, 1)
	if c == d {
		t.Error("at temperature 1 the old log-probs changed nothing")
	}
	if slices.ContainsFunc(notes1, func(s string) bool { return strings.Contains(s, "not used") }) {
		t.Errorf("a note at temperature 1: %q", notes1)
	}
}
