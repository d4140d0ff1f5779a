package confclip

import (
	"math"
	"testing"
)

// TestAnswerProbWorkedExample (docs/method.md, "answer_prob"): the
// reference answer "19" in two tokens with probabilities 0.9 and 0.6 after
// a completion's reasoning has p = (0.9 + 0.6)/2 = 0.75 (the mean of the
// probabilities, not their product 0.54); straight after the prompt they
// are 0.5 and 0.2, base 0.35; the reward is 0.75 - 0.35 = 0.4. A reasoning
// that leaves the answer at 0.3 earns max(0.3 - 0.35, 0) = 0.
func TestAnswerProbWorkedExample(t *testing.T) {
	p := AnswerProb([]float64{math.Log(0.9), math.Log(0.6)})
	base := AnswerProb([]float64{math.Log(0.5), math.Log(0.2)})
	if math.Abs(p-0.75) > 1e-12 || math.Abs(base-0.35) > 1e-12 {
		t.Fatalf("p %v, base %v; by hand 0.75 and 0.35", p, base)
	}
	rw, err := NewReward("answer_prob", DefaultRewardParams)
	if err != nil {
		t.Fatal(err)
	}
	r := make([]float64, 2)
	rw.Group(r, []float64{0, 1}, []float64{DebiasAnswerProb(p, base), DebiasAnswerProb(0.3, base)})
	if !rw.AnswerProb || math.Abs(r[0]-0.4) > 1e-12 || r[1] != 0 {
		t.Errorf("rewards %v, by hand [0.4 0]", r)
	}
	if AnswerProb(nil) != 0 {
		t.Error("an answer without tokens of its own has probability 0")
	}
}
