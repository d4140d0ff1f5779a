package train

import (
	"context"
	"strings"
	"testing"
)

// TestProfileSplitsPasses: a training step's profile puts the forward's
// products in the forward phase and the backward's in the backward one.
// llama_pg_eval's loss is a node no kernel computes (patch 0045), and the
// profile once marked the backward pass from its completion: every op,
// OUT_PROD and the *_BACK ops included, came out as forward.
func TestProfileSplitsPasses(t *testing.T) {
	m := load(t, false)
	cfg := DefaultConfig()
	cfg.Profile = true
	tr, err := NewLoRATrainer(m, newAdapter(t, m, true), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Step(context.Background(), randomExamples(m, 4, 1)); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range tr.Profile() {
		phase := "forward"
		if s.Backward {
			phase = "backward"
		}
		seen[phase+" "+s.Op] = true
		if !s.Backward && (s.Op == "OUT_PROD" || strings.HasSuffix(s.Op, "_BACK")) {
			t.Errorf("%s (%d nodes) is in the forward phase", s.Op, s.Count)
		}
	}
	for _, want := range []string{"forward MUL_MAT", "forward SOFT_MAX", "backward OUT_PROD", "backward SOFT_MAX_BACK", "backward CROSS_ENTROPY_LOSS_BACK"} {
		if !seen[want] {
			t.Errorf("no %s in the profile: %v", want, seen)
		}
	}
}
