package confclip

import (
	"fmt"
	"math"
)

// GRPOEps is added to the group's reward std in the GRPO advantage so that a
// group with (almost) equal rewards does not divide by zero.
const GRPOEps = 1e-6

// AdvantageFunc fills a with the advantages of one group from its rewards r.
// Each completion's advantage is broadcast to all of its tokens.
type AdvantageFunc func(a, r []float64)

var advantageFuncs = map[string]AdvantageFunc{
	"grpo":    GRPO,
	"dr_grpo": DrGRPO,
	"rloo":    RLOO,
	"none":    RawReward,
}

// LookupAdvantage returns the estimator registered under an advantage.estimator name.
func LookupAdvantage(name string) (AdvantageFunc, error) {
	f, ok := advantageFuncs[name]
	if !ok {
		return nil, fmt.Errorf("unknown advantage estimator %q (known: %v)", name, AdvantageNames())
	}
	return f, nil
}

// AdvantageNames lists the advantage.estimator names, sorted.
func AdvantageNames() []string { return sortedKeys(advantageFuncs) }

// MeanStd returns the mean and the sample standard deviation (n-1 divisor)
// of a group's rewards; std is 0 for fewer than two rewards. The mean is
// taken as r_0 + mean(r_i - r_0), so a group of equal rewards has exactly
// that mean and exactly zero std, whatever the rounding of their sum.
func MeanStd(r []float64) (mean, std float64) {
	n := len(r)
	if n == 0 {
		return 0, 0
	}
	var s float64
	for _, x := range r {
		s += x - r[0]
	}
	mean = r[0] + s/float64(n)
	if n < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range r {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(n-1))
}

// ZeroStd reports whether a group's rewards have zero spread, the case where
// every group advantage vanishes and the group teaches nothing (DAPO's
// dynamic sampling drops such groups).
func ZeroStd(r []float64) bool {
	_, std := MeanStd(r)
	return std == 0
}

// GRPO is the group-normalised advantage of GRPO (Shao et al. 2024,
// arXiv 2402.03300; verl compute_grpo_outcome_advantage),
//
//	A_i = (r_i - mean(r)) / (std(r) + 1e-6),
//
// with the n-1 std; a group of one gets A = 0.
func GRPO(a, r []float64) {
	mean, std := MeanStd(r)
	if len(r) < 2 {
		clear(a)
		return
	}
	for i, x := range r {
		a[i] = (x - mean) / (std + GRPOEps)
	}
}

// DrGRPO is the Dr. GRPO advantage (Liu et al. 2025, arXiv 2503.20783),
// GRPO without the std division, which biases toward groups of low spread:
//
//	A_i = r_i - mean(r).
func DrGRPO(a, r []float64) {
	mean, _ := MeanStd(r)
	for i, x := range r {
		a[i] = x - mean
	}
}

// RLOO is the REINFORCE leave-one-out advantage (Ahmadian et al. 2024,
// arXiv 2402.14740; verl compute_rloo_outcome_advantage),
//
//	A_i = r_i - mean_{j≠i} r_j = n/(n-1) (r_i - mean(r)),
//
// computed in the second form; a group of one gets A = 0.
func RLOO(a, r []float64) {
	n := len(r)
	if n < 2 {
		clear(a)
		return
	}
	mean, _ := MeanStd(r)
	k := float64(n) / float64(n-1)
	for i, x := range r {
		a[i] = k * (x - mean)
	}
}

// RawReward is the advantage without a baseline, A_i = r_i (REINFORCE).
func RawReward(a, r []float64) { copy(a, r) }

// MaskTruncated sets A_i = 0 for completions that stopped on the length
// limit (truncated[i]), so that a cut-off answer is neither rewarded nor
// punished (advantage.mask_truncated; DAPO's overlong filtering).
func MaskTruncated(a []float64, truncated []bool) {
	for i, t := range truncated {
		if t {
			a[i] = 0
		}
	}
}

// Advantage scales (advantage.scale): what the GRPO advantage divides the
// centred rewards by.
const (
	ScaleGroup = "group" // each group's own std (GRPO)
	ScaleBatch = "batch" // the std of every reward in the batch (TRL's scale_rewards="batch")
	ScaleNone  = "none"  // nothing: Dr. GRPO's r_i - mean(r)
)

// ScaleNames lists the advantage.scale values.
func ScaleNames() []string { return []string{ScaleGroup, ScaleBatch, ScaleNone} }

// GRPOBatch is the GRPO advantage with the batch's std (TRL's
// scale_rewards="batch"; Liu et al. 2025's critique of per-group std),
// one slice per group in a and r:
//
//	A_i = (r_i - mean of i's group) / (std over every reward of the batch + 1e-6),
//
// with the n-1 std. A group whose rewards are nearly equal keeps nearly
// zero advantages instead of having its small differences blown up to unit
// size by its own small std; a group of one gets A = 0.
func GRPOBatch(a, r [][]float64) {
	var all []float64
	for _, g := range r {
		all = append(all, g...)
	}
	_, std := MeanStd(all)
	for gi, g := range r {
		if len(g) < 2 {
			clear(a[gi])
			continue
		}
		mean, _ := MeanStd(g)
		for i, x := range g {
			a[gi][i] = (x - mean) / (std + GRPOEps)
		}
	}
}
