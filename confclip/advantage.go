package confclip

import (
	"fmt"
	"math"
)

// GRPOEps is added to the group's reward std in the GRPO advantage so that a
// group with (almost) equal rewards does not divide by zero.
const GRPOEps = 1e-6

// An Estimator fills a[g] with the advantages of group g from its rewards
// r[g], seeing the whole batch: verl's estimators take the batch too, and
// GRPO with the batch's std needs every group's rewards. Each completion's
// advantage is broadcast to all of its tokens.
type Estimator func(a, r [][]float64)

// AdvantageEstimator is an estimator registered under an
// advantage.estimator name.
type AdvantageEstimator struct {
	Name     string
	Estimate Estimator
	// Batch says that a group's advantages depend on the other groups'
	// rewards, so that a shard of the groups cannot be scored alone.
	Batch bool
}

// PerGroup makes an Estimator of one that sees a group at a time.
func PerGroup(f func(a, r []float64)) Estimator {
	return func(a, r [][]float64) {
		for g := range r {
			f(a[g], r[g])
		}
	}
}

var advantageEstimators = map[string]AdvantageEstimator{}

// RegisterAdvantage adds an estimator. A name already taken is an error
// (as verl's register_adv_est refuses one), so that no estimator silently
// replaces another.
func RegisterAdvantage(e AdvantageEstimator) error {
	switch {
	case e.Name == "":
		return fmt.Errorf("RegisterAdvantage: an estimator needs a name")
	case e.Estimate == nil:
		return fmt.Errorf("RegisterAdvantage %q: no Estimate function", e.Name)
	}
	if _, ok := advantageEstimators[e.Name]; ok {
		return fmt.Errorf("RegisterAdvantage: an advantage estimator %q is registered already", e.Name)
	}
	advantageEstimators[e.Name] = e
	return nil
}

func init() {
	for _, e := range []AdvantageEstimator{
		{Name: "grpo", Estimate: PerGroup(GRPO)},
		{Name: "grpo_batch", Estimate: GRPOBatch, Batch: true},
		{Name: "dr_grpo", Estimate: PerGroup(DrGRPO)},
		{Name: "rloo", Estimate: PerGroup(RLOO)},
		{Name: "none", Estimate: PerGroup(RawReward)},
	} {
		if err := RegisterAdvantage(e); err != nil {
			panic(err)
		}
	}
}

// LookupAdvantage returns the estimator registered under an advantage.estimator name.
func LookupAdvantage(name string) (AdvantageEstimator, error) {
	e, ok := advantageEstimators[name]
	if !ok {
		return AdvantageEstimator{}, fmt.Errorf("unknown advantage estimator %q (known: %v)", name, AdvantageNames())
	}
	return e, nil
}

// AdvantageNames lists the advantage.estimator names, sorted.
func AdvantageNames() []string { return sortedKeys(advantageEstimators) }

// AdvantageFor is the estimator that advantage.estimator and
// advantage.scale name together: the scale picks what GRPO divides by
// (ScaleGroup: grpo itself; ScaleBatch: grpo_batch; ScaleNone: dr_grpo), and
// only GRPO has a scale to pick.
func AdvantageFor(estimator, scale string) (AdvantageEstimator, error) {
	name := estimator
	switch {
	case scale == "" || scale == ScaleGroup:
	case scale != ScaleBatch && scale != ScaleNone:
		return AdvantageEstimator{}, fmt.Errorf("unknown advantage.scale %q (want one of %v)", scale, ScaleNames())
	case estimator != "grpo":
		return AdvantageEstimator{}, fmt.Errorf("advantage.scale %q scales the grpo estimator; advantage.estimator is %q", scale, estimator)
	case scale == ScaleBatch:
		name = "grpo_batch"
	default:
		name = "dr_grpo"
	}
	return LookupAdvantage(name)
}

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
