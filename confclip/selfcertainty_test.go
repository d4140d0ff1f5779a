package confclip_test

import (
	"math"
	"testing"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/sampler"
)

// TestSelfCertaintyWorkedExample (docs/method.md, "self_certainty"): a
// vocabulary of 4, logits z = [2, 0, 0, 0] at one position: S = 1 + 3e^-2
// = 1.40601, the mean of z - max is -1.5, KL(U || p) = log S + 1.5 - log 4
// = 0.45446; uniform logits give 0; the completion of both positions has
// self-certainty 0.22723, which reward self_certainty gives it. The
// sampler's KL is also the definition's -log V - (1/V) Σ log p_j.
func TestSelfCertaintyWorkedExample(t *testing.T) {
	var kl []float64
	for _, z := range [][]float32{{2, 0, 0, 0}, {0, 0, 0, 0}} {
		st, err := sampler.Scan(z, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := sampler.ForcedChoice(z, 1, st)
		if err != nil {
			t.Fatal(err)
		}
		def := -math.Log(4)
		for j := range z {
			lp, _, err := sampler.LogSoftmaxAt(z, int32(j))
			if err != nil {
				t.Fatal(err)
			}
			def -= lp / 4
		}
		if math.Abs(ch.SelfCertainty-def) > 1e-12 {
			t.Errorf("z = %v: self-certainty %v, by its definition %v", z, ch.SelfCertainty, def)
		}
		kl = append(kl, ch.SelfCertainty)
	}
	if math.Abs(kl[0]-0.45446) > 5e-6 || math.Abs(kl[1]) > 1e-15 {
		t.Errorf("per-token self-certainties %v, by hand [0.45446 0]", kl)
	}
	sc := confclip.SelfCertainty(kl)
	if math.Abs(sc-0.22723) > 5e-6 {
		t.Errorf("completion's self-certainty %v, by hand 0.22723", sc)
	}
	rw, err := confclip.NewReward("self_certainty", confclip.DefaultRewardParams)
	if err != nil {
		t.Fatal(err)
	}
	r := make([]float64, 2)
	rw.Group(r, []float64{0, 1}, []float64{sc, 0.1}) // the verdicts do not count
	if !rw.SelfCertainty || r[0] != sc || r[1] != 0.1 {
		t.Errorf("reward self_certainty %+v gave %v for self-certainties [%v 0.1]", rw, r, sc)
	}
}
