package confclip

import (
	"math"
	"testing"
)

// TestStatedConfidence: the last <confidence> tag counts; a number from 0
// to 1 with spaces around it is read; anything else states none.
func TestStatedConfidence(t *testing.T) {
	for text, want := range map[string]float64{
		"<answer>4</answer> <confidence>0.9</confidence>":                0.9,
		"<confidence> 0.25 </confidence>":                                0.25,
		"<confidence>1</confidence>":                                     1,
		"<confidence>0</confidence>":                                     0,
		"<confidence>.5</confidence>":                                    0.5,
		"<confidence>5e-1</confidence>":                                  0.5,
		"<confidence>0.1</confidence> then <confidence>0.6</confidence>": 0.6,
		"<confidence>\n0.7\n</confidence>":                               0.7,
	} {
		if q, ok := StatedConfidence(text); !ok || q != want {
			t.Errorf("%q: %v, %v; want %v", text, q, ok, want)
		}
	}
	for _, text := range []string{
		"no tag", "<confidence></confidence>", "<confidence>1.5</confidence>", "<confidence>-0.1</confidence>",
		"<confidence>high</confidence>", "<confidence>nan</confidence>", "<confidence>0x1p-1</confidence>",
		"<confidence>0.9</confidence> <confidence>90%</confidence>", // the last one is not a number
		"<Confidence>0.9</Confidence>", "<confidence>0.9",
	} {
		if q, ok := StatedConfidence(text); ok {
			t.Errorf("%q: read %v, want none", text, q)
		}
	}
}

// TestRLCRWorkedExample (docs/method.md, "RLCR"): a group of four,
// verdicts v = [1, 0, 1, 1] and stated confidences q = [0.9, 0.8, none,
// 0.25]:
//
//	r_1 = 1 - (0.9 - 1)^2  = 0.99
//	r_2 = 0 - (0.8 - 0)^2  = -0.64
//	r_3 = RLCRMissing       = -2
//	r_4 = 1 - (0.25 - 1)^2 = 0.4375
//
// A right answer stated with confidence 0.9 beats one stated with 0.25; a
// wrong one at 0.8 loses 0.64; no valid confidence is worst of all.
func TestRLCRWorkedExample(t *testing.T) {
	v := []float64{1, 0, 1, 1}
	q := []float64{0.9, 0.8, math.NaN(), 0.25}
	r := make([]float64, 4)
	rw, err := NewReward("rlcr", DefaultRewardParams)
	if err != nil {
		t.Fatal(err)
	}
	if !rw.Stated || rw.NeedsConfidence {
		t.Fatalf("rlcr reads stated confidences only: %+v", rw)
	}
	rw.Group(r, v, q)
	for i, want := range []float64{0.99, -0.64, -2, 0.4375} {
		if math.Abs(r[i]-want) > 1e-12 {
			t.Errorf("r_%d = %v, want %v", i+1, r[i], want)
		}
	}
}
