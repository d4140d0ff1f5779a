package teacherforce

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/testkit/pipelinetest"
)

// TestFileMatchesRollout: the log-probs teacher forcing
// computes for rollouts are those sampled with them.
func TestFileMatchesRollout(t *testing.T) {
	cfg, data := pipelinetest.Fixture(t,
		`{"id":"a","prompt":"Say 1:","answer":"x"}`,
		`{"id":"b","prompt":"Say 2:","answer":"x"}`,
	)
	m, err := pipeline.OpenModel(cfg.Model)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	dir := t.TempDir()
	rolls := filepath.Join(dir, "rollouts.jsonl")
	if _, err := pipeline.Rollout(context.Background(), m, pipeline.RolloutOptions{Config: cfg, In: data, Out: rolls}); err != nil {
		t.Fatal(err)
	}
	// Keep only prompt and text: what completions made elsewhere have.
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](rolls, false)
	if err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare.jsonl")
	w, _ := dataset.Create(bare)
	for _, r := range recs {
		w.Write(dataset.Rollout{PromptID: r.PromptID, Sample: r.Sample, Prompt: r.Prompt, PromptTokens: r.PromptTokens, Tokens: r.Tokens, Text: r.Text, Answer: r.Answer})
	}
	w.Commit()
	var progress []int
	out := filepath.Join(dir, "forced.jsonl")
	res, err := File(context.Background(), m, Options{Config: cfg, In: bare, Out: out, Chunk: 4,
		Progress: func(e pipeline.Event) { progress = append(progress, e.(pipeline.TeacherForceProgress).Records) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != len(recs) || !slices.Equal(progress, []int{4, 6}) {
		t.Fatalf("%d records, progress %v", res.Records, progress)
	}
	forced, _, _, err := dataset.ReadFile[dataset.Rollout](out, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range forced {
		for j, lp := range r.Logprobs {
			if d := math.Abs(lp - recs[i].Logprobs[j]); d > 1e-4 {
				t.Fatalf("record %d token %d: teacher-forced %v, sampled %v", i, j, lp, recs[i].Logprobs[j])
			}
		}
	}
	// Score through the same handle: records without log-probs are forced.
	so := pipeline.NewScoreOptions(cfg, bare, "")
	so.Model = m
	sum, err := pipeline.Score(context.Background(), so)
	if err != nil || sum.TeacherForced != len(recs) {
		t.Fatalf("score with a model: %d teacher-forced, %v", sum.TeacherForced, err)
	}
}
