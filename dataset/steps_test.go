package dataset

import (
	"fmt"
	"testing"
)

func promptSet(n int) []Prompt {
	ps := make([]Prompt, n)
	for i := range ps {
		ps[i] = Prompt{ID: fmt.Sprintf("p%d", i), Prompt: fmt.Sprintf("Q%d", i)}
	}
	return ps
}

// TestStepPromptsDistinct: a step never holds a prompt twice, whatever
// prompts_per_step. The old sampler took a step's prompts across the end of
// a pass from two different shuffles, so a step could hold a prompt twice
// (the run then died with "group ... has 16 completions, want 8").
func TestStepPromptsDistinct(t *testing.T) {
	for _, tc := range []struct{ prompts, perStep int }{{10, 3}, {10, 7}, {10, 10}, {800, 40}, {7, 6}, {5, 9}} {
		ps := promptSet(tc.prompts)
		for _, seed := range []uint64{1, 2, 3, 4, 5} {
			seen := map[string]int{} // times each prompt was drawn
			steps := 3 * tc.prompts / min(tc.perStep, tc.prompts)
			for step := 1; step <= steps; step++ {
				batch := StepPrompts(ps, tc.perStep, seed, step)
				if want := min(tc.perStep, tc.prompts); len(batch) != want {
					t.Fatalf("%d prompts, %d per step: step %d has %d prompts, want %d", tc.prompts, tc.perStep, step, len(batch), want)
				}
				in := map[string]bool{}
				for _, p := range batch {
					if in[p.ID] {
						t.Fatalf("%d prompts, %d per step, seed %d: step %d holds %s twice", tc.prompts, tc.perStep, seed, step, p.ID)
					}
					in[p.ID] = true
					seen[p.ID]++
				}
			}
			// Every prompt comes round about equally often (passes are
			// whole permutations; a prompt deferred across a boundary
			// moves to the next step, it is not dropped).
			lo, hi := steps, 0
			for _, p := range ps {
				lo, hi = min(lo, seen[p.ID]), max(hi, seen[p.ID])
			}
			if hi-lo > 1 {
				t.Errorf("%d prompts, %d per step, seed %d: a prompt drawn %d times, another %d", tc.prompts, tc.perStep, seed, hi, lo)
			}
		}
	}
}

// TestStepPromptsDeterministic: a step's prompts depend only on the seed and
// the step (resume relies on it), and when prompts_per_step divides the
// prompts each pass is one permutation.
func TestStepPromptsDeterministic(t *testing.T) {
	ps := promptSet(12)
	for step := 1; step <= 9; step++ {
		a, b := StepPrompts(ps, 5, 3, step), StepPrompts(ps, 5, 3, step)
		for i := range a {
			if a[i].ID != b[i].ID {
				t.Fatalf("step %d: %s then %s", step, a[i].ID, b[i].ID)
			}
		}
	}
	pass := map[string]bool{}
	for step := 1; step <= 3; step++ {
		for _, p := range StepPrompts(ps, 4, 3, step) {
			pass[p.ID] = true
		}
	}
	if len(pass) != 12 {
		t.Errorf("three steps of 4 out of 12 prompts hold %d distinct prompts, want 12", len(pass))
	}
}
