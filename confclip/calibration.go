package confclip

import (
	"math"
	"sort"
)

// CalibrationBins is the number of equal-width confidence bins of the
// expected calibration error.
const CalibrationBins = 10

// Calibration says how well confidence predicts correctness.
type Calibration struct {
	N     int     `json:"n"`
	ECE   float64 `json:"ece"`
	Brier float64 `json:"brier"`
	// AUROC is undefined (and AUROCDefined false) when every completion is
	// right or every one is wrong.
	AUROC        float64 `json:"auroc"`
	AUROCDefined bool    `json:"auroc_defined"`
}

// Calibrate computes ECE (10 bins), Brier score and AUROC of confidences
// against correctness labels.
func Calibrate(conf []float64, correct []bool) Calibration {
	auc, ok := AUROC(conf, correct)
	return Calibration{
		N:            len(conf),
		ECE:          ECE(conf, correct, CalibrationBins),
		Brier:        Brier(conf, correct),
		AUROC:        auc,
		AUROCDefined: ok,
	}
}

// ECE is the expected calibration error (Guo et al. 2017, arXiv 1706.04599)
// over equal-width bins of [0, 1],
//
//	ECE = Σ_b (n_b / N) |acc(b) - conf(b)|,
//
// with acc(b) the fraction right and conf(b) the mean confidence in bin b
// (bin b holds c in [b/B, (b+1)/B); c = 1 falls in the last). Confidences
// are clamped to [0, 1]; no input gives 0.
func ECE(conf []float64, correct []bool, bins int) float64 {
	if len(conf) == 0 || bins <= 0 {
		return 0
	}
	n := make([]int, bins)
	right := make([]int, bins)
	sum := make([]float64, bins)
	for i, c := range conf {
		c = clamp(c, 0, 1)
		b := min(int(c*float64(bins)), bins-1)
		n[b]++
		sum[b] += c
		if correct[i] {
			right[b]++
		}
	}
	var ece float64
	for b := range bins {
		if n[b] == 0 {
			continue
		}
		acc := float64(right[b]) / float64(n[b])
		ece += float64(n[b]) * math.Abs(acc-sum[b]/float64(n[b]))
	}
	return ece / float64(len(conf))
}

// Brier is the Brier score, the mean squared error of confidence as a
// probability of being right: (1/N) Σ_i (c_i - y_i)^2. No input gives 0.
func Brier(conf []float64, correct []bool) float64 {
	if len(conf) == 0 {
		return 0
	}
	var s float64
	for i, c := range conf {
		d := clamp(c, 0, 1)
		if correct[i] {
			d--
		}
		s += d * d
	}
	return s / float64(len(conf))
}

// AUROC is the area under the ROC curve of score as a detector of label:
// the probability that a random positive scores above a random negative,
// ties counting one half. It is the Mann-Whitney statistic with mid-ranks,
//
//	AUROC = (Σ_{i positive} rank_i - P(P+1)/2) / (P N),
//
// computed in O(n log n). ok is false when there are no positives or no
// negatives. NaN scores rank lowest.
func AUROC(score []float64, label []bool) (auc float64, ok bool) {
	n := len(score)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	key := func(i int) float64 {
		if math.IsNaN(score[i]) {
			return math.Inf(-1)
		}
		return score[i]
	}
	sort.Slice(idx, func(a, b int) bool { return key(idx[a]) < key(idx[b]) })
	var pos, rankSum float64
	for i := 0; i < n; {
		j := i
		for j < n && key(idx[j]) == key(idx[i]) {
			j++
		}
		mid := float64(i+j+1) / 2 // mean of the 1-based ranks i+1..j
		for _, k := range idx[i:j] {
			if label[k] {
				pos++
				rankSum += mid
			}
		}
		i = j
	}
	neg := float64(n) - pos
	if pos == 0 || neg == 0 {
		return 0, false
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg), true
}
