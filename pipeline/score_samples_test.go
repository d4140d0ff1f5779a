package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/confclip/confclip/dataset"
)

// TestScoreRejectsBadSampleIndices: a group's sample indices must be
// 0..G-1, each once; -1, 1e9 and a repeated index used to be accepted.
func TestScoreRejectsBadSampleIndices(t *testing.T) {
	good := func(pid string, sample int) dataset.Rollout {
		r := textOnly(pid, sample, "x = 4", "4")
		r.Tokens, r.Logprobs = []int32{1}, []float64{-0.1}
		return r
	}
	tests := []struct {
		name   string
		lines  []any
		line   int
		errHas string
	}{
		{"negative", []any{good("a", 0), good("a", 1), good("b", 0), good("b", -1)}, 4, `prompt "b": sample -1 outside 0..1`},
		{"huge", []any{good("a", 0), good("a", 1), good("b", 1e9), good("b", 0)}, 3, `prompt "b": sample 1000000000 outside 0..1`},
		{"duplicate", []any{good("a", 0), good("a", 1), good("b", 1), good("b", 1)}, 4, `prompt "b": sample 1 appears twice (also on line 3)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.jsonl")
			writeJSONL(t, in, tt.lines...)
			o := testOptions(in, filepath.Join(dir, "out.jsonl"))
			_, err := Score(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s:%d:", in, tt.line)) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("err = %v, want %s:%d: ...%s", err, in, tt.line, tt.errHas)
			}
			assertNoOutput(t, o.Out)

			o.SkipBad = true
			sum, err := Score(context.Background(), o)
			if err != nil {
				t.Fatalf("with SkipBad: %v", err)
			}
			if sum.Skipped.Records != 2 || sum.Records != 2 || sum.Skipped.Reasons[badRecord] == 0 {
				t.Errorf("skipped %d (%v), kept %d; want the bad group's 2 skipped and 2 kept", sum.Skipped.Records, sum.Skipped.Reasons, sum.Records)
			}
			if n := len(readScored(t, o.Out)); n != 2 {
				t.Errorf("%d records written, want 2", n)
			}
		})
	}
}
