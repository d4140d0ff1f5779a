package pipeline

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/dataset/parquetio"
)

// The TRL and verl layouts carry the same values under each project's
// names, in JSONL and Parquet alike, and confclip train refuses them.
func TestExportLayouts(t *testing.T) {
	recs := exportFixture()
	in := writeScoredFile(t, recs)
	dir := t.TempDir()
	for _, format := range []string{dataset.FormatJSONL, dataset.FormatParquet} {
		trl := filepath.Join(dir, "trl."+format)
		if _, err := Export(ExportOptions{In: in, Out: trl, Layout: dataset.LayoutTRL}); err != nil {
			t.Fatal(err)
		}
		rows := readRows(t, trl)
		if len(rows) != len(recs) {
			t.Fatalf("%s: %d rows", trl, len(rows))
		}
		for i, rec := range recs {
			r := rows[i]
			if r["prompt"] != rec.Prompt || r["completion"] != rec.Text || r["solution"] != rec.Answer || r["label"] != rec.VerifierResult.Correct {
				t.Errorf("%s row %d text: %v", trl, i, r)
			}
			if got := ints(r["completion_ids"]); !slices.Equal(got, rec.Tokens) {
				t.Errorf("%s row %d completion_ids %v, want %v", trl, i, got, rec.Tokens)
			}
			if got := floats(r["old_per_token_logps"]); !slices.Equal(got, rec.SamplingLogprobs) {
				t.Errorf("%s row %d old_per_token_logps %v, want %v", trl, i, got, rec.SamplingLogprobs)
			}
			if got, _ := toFloat(r["advantages"]); got != rec.Advantage {
				t.Errorf("%s row %d advantages %v, want the sequence's %v", trl, i, r["advantages"], rec.Advantage)
			}
		}
		if _, err := dataset.ReadTrainExamples(trl); err == nil || !strings.Contains(err.Error(), "trl") {
			t.Errorf("%s read back as a confclip training set: %v", trl, err)
		}

		verl := filepath.Join(dir, "verl."+format)
		if _, err := Export(ExportOptions{In: in, Out: verl, Layout: dataset.LayoutVerl}); err != nil {
			t.Fatal(err)
		}
		rows = readRows(t, verl)
		for i, rec := range recs {
			r := rows[i]
			n := len(rec.Tokens)
			rm, _ := r["reward_model"].(map[string]any)
			if r["uid"] != rec.PromptID || r["prompt"] != rec.Prompt || r["response"] != rec.Text || rm["ground_truth"] != rec.Answer {
				t.Errorf("%s row %d: %v", verl, i, r)
			}
			if got := ints(r["input_ids"]); !slices.Equal(got, append(slices.Clone(rec.PromptTokens), rec.Tokens...)) {
				t.Errorf("%s row %d input_ids %v", verl, i, got)
			}
			if got := ints(r["responses"]); !slices.Equal(got, rec.Tokens) {
				t.Errorf("%s row %d responses %v, want %v", verl, i, got, rec.Tokens)
			}
			if got := ints(r["response_mask"]); !slices.Equal(got, slices.Repeat([]int32{1}, n)) {
				t.Errorf("%s row %d response_mask %v", verl, i, got)
			}
			if got := floats(r["old_log_probs"]); !slices.Equal(got, rec.SamplingLogprobs) {
				t.Errorf("%s row %d old_log_probs %v", verl, i, got)
			}
			if got := floats(r["advantages"]); !slices.Equal(got, slices.Repeat([]float64{rec.Advantage}, n)) {
				t.Errorf("%s row %d advantages %v", verl, i, got)
			}
			if got := floats(r["token_level_rewards"]); len(got) != n || got[n-1] != rec.Reward {
				t.Errorf("%s row %d token_level_rewards %v: want the reward %v on the last token", verl, i, got, rec.Reward)
			}
		}
		if _, err := dataset.ReadTrainExamples(verl); err == nil || !strings.Contains(err.Error(), "verl") {
			t.Errorf("%s read back as a confclip training set: %v", verl, err)
		}
	}
	if _, err := Export(ExportOptions{In: in, Out: filepath.Join(dir, "x.jsonl"), Layout: "deepspeed"}); err == nil {
		t.Error("an unknown layout was accepted")
	}
}

// readRows reads a JSONL or Parquet file as generic rows, the way a
// Python loader sees columns by name.
func readRows(t *testing.T, path string) []map[string]any {
	t.Helper()
	if strings.HasSuffix(path, ".parquet") {
		rows, err := parquetio.ReadRows(path)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	var rows []map[string]any
	recs, _, _, err := dataset.ReadFile[map[string]any](path, false)
	if err != nil {
		t.Fatal(err)
	}
	rows = append(rows, recs...)
	return rows
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case int32:
		return float64(x), true
	}
	return 0, false
}

func ints(v any) []int32 {
	l, _ := v.([]any)
	out := make([]int32, 0, len(l))
	for _, x := range l {
		f, _ := toFloat(x)
		out = append(out, int32(f))
	}
	return out
}

func floats(v any) []float64 {
	l, _ := v.([]any)
	out := make([]float64, 0, len(l))
	for _, x := range l {
		f, _ := toFloat(x)
		out = append(out, f)
	}
	return out
}
