package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
)

// BenchmarkScore times scoring without a model: 10,000 records of 256-token
// completions in groups of 8, under ConfClip and under binary in the same run
// (with the exact verifier).
func BenchmarkScore(b *testing.B) {
	const records, tokens, group = 10_000, 256, 8
	in := filepath.Join(b.TempDir(), "rollouts.jsonl")
	f, err := os.Create(in)
	if err != nil {
		b.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for i := range records {
		r := dataset.Rollout{
			Schema: dataset.SchemaRollout, PromptID: fmt.Sprintf("p%d", i/group), Prompt: "What is 6*7?", Answer: "42",
			Sample: i % group, Tokens: make([]int32, tokens), Logprobs: make([]float64, tokens),
			SamplingLogprobs: make([]float64, tokens), TokenOffsets: make([]int, tokens), Finish: dataset.FinishStop,
		}
		var text strings.Builder
		for t := range tokens {
			r.Tokens[t] = int32(1000 + (i*7+t*13)%30000)
			r.Logprobs[t] = -float64((i+t)%17) / 8
			r.SamplingLogprobs[t] = r.Logprobs[t]
			r.TokenOffsets[t] = text.Len()
			text.WriteString(" tok")
		}
		fmt.Fprintf(&text, " = %d", 41+i%3)
		r.Text = text.String()
		if err := enc.Encode(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	rate := map[string]float64{}
	for _, reward := range []string{"confclip", "binary"} {
		b.Run(reward, func(b *testing.B) {
			o := NewScoreOptions(DefaultConfig(), in, filepath.Join(b.TempDir(), "scored.jsonl"))
			o.Verifier.Name, o.Reward.Method = "exact", reward
			for b.Loop() {
				if _, err := Score(context.Background(), o); err != nil {
					b.Fatal(err)
				}
			}
			rate[reward] = float64(records*b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate[reward], "records/s")
			if reward == "binary" && rate["confclip"] > 0 {
				// The cost of confidence and the ConfClip reward over the
				// baseline, measured in the same run.
				b.ReportMetric(rate[reward]/rate["confclip"], "binary/confclip")
			}
		})
	}
}
