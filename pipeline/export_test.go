package pipeline

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/scoring"
)

// scoredRecord makes a scored completion of n tokens.
func scoredRecord(prompt string, sample, n int, reward, adv float64) dataset.Scored {
	r := dataset.Scored{Reward: reward, Advantage: adv, Confidence: 0.5}
	r.Schema, r.PromptID, r.Sample, r.Text = dataset.SchemaScored, prompt, sample, fmt.Sprintf("x%d", sample)
	r.Prompt, r.Answer = "Q: "+prompt, "A"+prompt
	r.VerifierResult.Correct = reward > 0.5
	r.PromptTokens = []int32{1, 100, int32(len(prompt))}
	for i := range n {
		r.Tokens = append(r.Tokens, int32(200+10*sample+i))
		r.Logprobs = append(r.Logprobs, -0.1*float64(i+1))
		r.SamplingLogprobs = append(r.SamplingLogprobs, -0.2*float64(i+1))
		r.Entropies = append(r.Entropies, 1)
	}
	return r
}

// exportFixture is three groups: "mixed" (rewards differ), "same" (equal
// rewards) and "alone" (a group of one); the last two have zero std.
func exportFixture() []dataset.Scored {
	return []dataset.Scored{
		scoredRecord("mixed", 0, 3, 1, 0.7071),
		scoredRecord("same", 0, 2, 0.8, 0),
		scoredRecord("mixed", 1, 4, -0.5, -0.7071),
		scoredRecord("same", 1, 1, 0.8, 0),
		scoredRecord("alone", 0, 5, 0.3, 0),
	}
}

func writeScoredFile(t *testing.T, recs []dataset.Scored) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scored.jsonl")
	w, err := dataset.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkExample compares one example with the record it came from.
func checkExample(t *testing.T, ex dataset.TrainExample, rec dataset.Scored, prov dataset.Provenance) {
	t.Helper()
	n := len(rec.Tokens)
	ones := slices.Repeat([]int32{1}, n)
	advs := slices.Repeat([]float64{rec.Advantage}, n)
	switch {
	case ex.Schema != dataset.SchemaTrain:
		t.Errorf("schema %q", ex.Schema)
	case ex.PromptID != rec.PromptID || ex.Sample != rec.Sample:
		t.Errorf("example %s/%d for record %s/%d", ex.PromptID, ex.Sample, rec.PromptID, rec.Sample)
	case !slices.Equal(ex.PromptIDs, rec.PromptTokens):
		t.Errorf("%s/%d prompt_ids %v, want %v", rec.PromptID, rec.Sample, ex.PromptIDs, rec.PromptTokens)
	case !slices.Equal(ex.CompletionIDs, rec.Tokens):
		t.Errorf("%s/%d completion_ids %v, want %v", rec.PromptID, rec.Sample, ex.CompletionIDs, rec.Tokens)
	case !slices.Equal(ex.CompletionMask, ones):
		t.Errorf("%s/%d completion_mask %v, want %d ones", rec.PromptID, rec.Sample, ex.CompletionMask, n)
	case ex.Advantage != rec.Advantage || !slices.Equal(ex.Advantages, advs):
		t.Errorf("%s/%d advantage %v / advantages %v, want %v broadcast", rec.PromptID, rec.Sample, ex.Advantage, ex.Advantages, rec.Advantage)
	case !slices.Equal(ex.OldLogprobs, rec.SamplingLogprobs):
		t.Errorf("%s/%d old_logprobs %v, want the sampling log-probs %v", rec.PromptID, rec.Sample, ex.OldLogprobs, rec.SamplingLogprobs)
	case ex.Reward != rec.Reward:
		t.Errorf("%s/%d reward %v, want %v", rec.PromptID, rec.Sample, ex.Reward, rec.Reward)
	case ex.Provenance != prov:
		t.Errorf("%s/%d provenance %+v, want %+v", rec.PromptID, rec.Sample, ex.Provenance, prov)
	case ex.Prompt != rec.Prompt || ex.Completion != rec.Text || ex.Answer != rec.Answer:
		t.Errorf("%s/%d text columns %q, %q, %q; want %q, %q, %q", rec.PromptID, rec.Sample, ex.Prompt, ex.Completion, ex.Answer, rec.Prompt, rec.Text, rec.Answer)
	}
}

func TestExportJSONL(t *testing.T) {
	recs := exportFixture()
	in := writeScoredFile(t, recs)
	dir := t.TempDir()
	model := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(model, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "train.jsonl")
	sum, err := Export(ExportOptions{In: in, Out: out, Model: model, Adapter: "lora.gguf", ConfigJSON: []byte(`{ "b": 1, "a": [1, 2.50] }`)})
	if err != nil {
		t.Fatal(err)
	}
	// The config hash is that of the canonical text, whatever the spacing or key order.
	configHash, err := dataset.ConfigHash([]byte(`{"a":[1,2.50],"b":1}`))
	if err != nil {
		t.Fatal(err)
	}
	prov := dataset.Provenance{
		ModelSHA256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", // sha256("abc")
		Adapter:     "lora.gguf",
		ConfigHash:  configHash,
	}
	if sum.Provenance != prov {
		t.Errorf("provenance %+v, want %+v", sum.Provenance, prov)
	}
	want := ExportSummary{Out: out, Format: dataset.FormatJSONL, Layout: dataset.LayoutConfclip, Records: 5, Groups: 3, ZeroStdGroups: 2, Examples: 5, Tokens: 15, Provenance: prov}
	if sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	exs, err := dataset.ReadTrainExamples(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(exs) != len(recs) {
		t.Fatalf("%d examples, want %d", len(exs), len(recs))
	}
	for i := range recs {
		checkExample(t, exs[i], recs[i], prov)
	}
}

// TestExportParquet writes Parquet, reads it back with parquet-go's own
// reader, and compares it with the JSONL export of the same records.
func TestExportParquet(t *testing.T) {
	recs := exportFixture()
	in := writeScoredFile(t, recs)
	dir := t.TempDir()
	out := filepath.Join(dir, "train.parquet")
	sum, err := Export(ExportOptions{In: in, Out: out, Adapter: "a.gguf", ConfigJSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Format != dataset.FormatParquet {
		t.Errorf("format %q inferred from %s, want parquet", sum.Format, out)
	}
	rows, err := parquet.ReadFile[dataset.TrainExample](out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(recs) {
		t.Fatalf("%d rows, want %d", len(rows), len(recs))
	}
	for i := range recs {
		checkExample(t, rows[i], recs[i], sum.Provenance)
	}

	// The columns carry the names other trainers expect.
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, fld := range pf.Schema().Fields() {
		cols = append(cols, fld.Name())
	}
	for _, want := range []string{"prompt_ids", "completion_ids", "completion_mask", "advantage", "advantages", "old_logprobs", "reward", "provenance"} {
		if !slices.Contains(cols, want) {
			t.Errorf("no column %q in %v", want, cols)
		}
	}

	// dataset.ReadTrainExamples knows Parquet by its magic bytes, and agrees with JSONL.
	jsonl := filepath.Join(dir, "train.jsonl")
	if _, err := Export(ExportOptions{In: in, Out: jsonl, Adapter: "a.gguf", ConfigJSON: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "train.bin")
	if err := os.Rename(out, renamed); err != nil {
		t.Fatal(err)
	}
	fromParquet, err := dataset.ReadTrainExamples(renamed)
	if err != nil {
		t.Fatal(err)
	}
	fromJSONL, err := dataset.ReadTrainExamples(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromParquet, fromJSONL) {
		t.Errorf("Parquet and JSONL read back differently:\n%+v\n%+v", fromParquet, fromJSONL)
	}
}

func TestExportSkipZeroStd(t *testing.T) {
	recs := exportFixture()
	in := writeScoredFile(t, recs)
	for _, format := range []string{dataset.FormatJSONL, dataset.FormatParquet} {
		out := filepath.Join(t.TempDir(), "train.out")
		sum, err := Export(ExportOptions{In: in, Out: out, Format: format, SkipZeroStd: true})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Groups != 3 || sum.ZeroStdGroups != 2 || sum.Dropped != 3 || sum.Examples != 2 || sum.Tokens != 7 {
			t.Errorf("%s: summary %+v, want 3 groups, 2 with zero std, 3 dropped, 2 examples, 7 tokens", format, sum)
		}
		exs, err := dataset.ReadTrainExamples(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(exs) != 2 {
			t.Fatalf("%s: %d examples, want the 2 of group mixed", format, len(exs))
		}
		checkExample(t, exs[0], recs[0], dataset.Provenance{})
		checkExample(t, exs[1], recs[2], dataset.Provenance{})
	}
}

// TestExportTeacherForced checks that a record without sampling log-probs
// falls back to its model log-probs for old_logprobs.
func TestExportTeacherForced(t *testing.T) {
	recs := exportFixture()
	recs[1].SamplingLogprobs = nil
	out := filepath.Join(t.TempDir(), "train.jsonl")
	sum, err := Export(ExportOptions{In: writeScoredFile(t, recs), Out: out})
	if err != nil {
		t.Fatal(err)
	}
	exs, _ := dataset.ReadTrainExamples(out)
	if sum.FromModelLogprobs != 1 || !slices.Equal(exs[1].OldLogprobs, recs[1].Logprobs) {
		t.Errorf("old_logprobs %v (fallbacks %d), want the model log-probs %v", exs[1].OldLogprobs, sum.FromModelLogprobs, recs[1].Logprobs)
	}
}

// TestExportBadRecord checks that a record Export cannot use is an error
// naming its file and line, and that nothing is left behind.
func TestExportBadRecord(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(*dataset.Scored)
		want  string
	}{
		{"no tokens", func(r *dataset.Scored) { r.Tokens, r.Logprobs, r.SamplingLogprobs, r.Entropies = nil, nil, nil, nil }, "no completion tokens"},
		{"no prompt tokens", func(r *dataset.Scored) { r.PromptTokens = nil }, "no prompt tokens"},
		{"short logprobs", func(r *dataset.Scored) { r.SamplingLogprobs = r.SamplingLogprobs[:1] }, "4 tokens but 1 log-probs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs := exportFixture()
			tt.spoil(&recs[2])
			in := writeScoredFile(t, recs)
			dir := t.TempDir()
			for _, out := range []string{"train.jsonl", "train.parquet"} {
				_, err := Export(ExportOptions{In: in, Out: filepath.Join(dir, out)})
				var le *dataset.LineError
				if !errors.As(err, &le) || le.File != in || le.Line != 3 {
					t.Fatalf("%s: error %v, want one at %s:3", out, err, in)
				}
				if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"mixed"`) {
					t.Errorf("%s: error %q does not say %q and name the prompt", out, err, tt.want)
				}
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("a failed export left %v behind", left)
			}
		})
	}
}

func TestExportFormat(t *testing.T) {
	tests := []struct{ out, format, want string }{
		{"train.jsonl", "", dataset.FormatJSONL},
		{"train.parquet", "", dataset.FormatParquet},
		{"TRAIN.PARQUET", "", dataset.FormatParquet},
		{"train", "", dataset.FormatJSONL},
		{"train.parquet", dataset.FormatJSONL, dataset.FormatJSONL},
		{"train.jsonl", dataset.FormatParquet, dataset.FormatParquet},
	}
	for _, tt := range tests {
		if got, err := exportFormat(tt.out, tt.format); err != nil || got != tt.want {
			t.Errorf("exportFormat(%q, %q) = %q, %v; want %q", tt.out, tt.format, got, err, tt.want)
		}
	}
	if _, err := exportFormat("x", "csv"); err == nil {
		t.Error("exportFormat accepted csv")
	}
}

func TestReadTrainExamplesSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.jsonl")
	body := `{"schema":"confclip.train/v1","prompt_id":"a","sample":0,"prompt_ids":[1],"completion_ids":[2],"completion_mask":[1],"advantage":0,"advantages":[0],"old_logprobs":[0],"reward":0,"provenance":{}}` + "\n\n" +
		`{"schema":"confclip.train/v9","prompt_id":"b"}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := dataset.ReadTrainExamples(path)
	var le *dataset.LineError
	if !errors.As(err, &le) || le.Line != 3 {
		t.Errorf("error %v, want one at line 3 about the schema", err)
	}
}

// TestStdFilter: RLPR's threshold is beta times the moving average of the
// earlier steps' mean group std (none before the first step, none with beta
// 0), and export's MinGroupStd drops the groups below it, zero-std ones
// included, counting them.
func TestStdFilter(t *testing.T) {
	a := scoring.AdvantageConfig{StdFilterBeta: 0.5, StdFilterEMA: 0.9}
	// step 0's evaluation row has no group std and is passed over
	rows := []metrics.Step{{GroupStdMean: math.NaN()}, {GroupStdMean: 0.4}, {GroupStdMean: 0.2}, {GroupStdMean: 0.6}}
	// ema: 0.4, then 0.9*0.4 + 0.1*0.2 = 0.38, then 0.9*0.38 + 0.1*0.6 = 0.402
	for n, want := range []float64{0, 0, 0.2, 0.19, 0.201} {
		if got := StdFilter(a, rows[:n]); math.Abs(got-want) > 1e-12 {
			t.Errorf("after %d steps: threshold %v, want %v", n, got, want)
		}
	}
	if got := StdFilter(scoring.AdvantageConfig{StdFilterEMA: 0.9}, rows); got != 0 {
		t.Errorf("beta 0: threshold %v", got)
	}

	var recs []dataset.Scored
	for _, g := range []struct {
		id      string
		rewards []float64
	}{{"flat", []float64{1, 1}}, {"low", []float64{0.5, 0.6}}, {"high", []float64{0, 1}}} {
		for i, r := range g.rewards {
			recs = append(recs, dataset.Scored{Rollout: dataset.Rollout{PromptID: g.id, Sample: i, PromptTokens: []int32{1}, Tokens: []int32{2}, Logprobs: []float64{-1}}, Reward: r})
		}
	}
	in := writeScoredFile(t, recs)
	dir := t.TempDir()
	sum, err := Export(ExportOptions{In: in, Out: filepath.Join(dir, "train.jsonl"), MinGroupStd: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	// stds (MeanStd's, n-1): flat 0, low 0.0707, high 0.707
	if sum.LowStdGroups != 2 || sum.Dropped != 4 || sum.Examples != 2 {
		t.Errorf("low-std groups %d, dropped %d, examples %d; want 2, 4, 2", sum.LowStdGroups, sum.Dropped, sum.Examples)
	}
}
