package reporting

import (
	"math"
)

// McNemar compares two evaluations of the same prompts, paired: fixed
// counts the prompts wrong before and right after, broken those right
// before and wrong after, and p is the exact two-sided McNemar p-value
// (the binomial test of fixed against broken with p = 1/2; prompts right
// or wrong in both carry no information about the change):
//
//	p = min(1, 2 * sum_{k <= min(fixed, broken)} C(n, k) / 2^n),  n = fixed + broken.
func McNemar(before, after map[string]bool) (fixed, broken int, p float64) {
	for id, b := range before {
		a, ok := after[id]
		if !ok {
			continue
		}
		switch {
		case !b && a:
			fixed++
		case b && !a:
			broken++
		}
	}
	return fixed, broken, mcNemarP(fixed, broken)
}

func mcNemarP(fixed, broken int) float64 {
	n := fixed + broken
	if n == 0 {
		return 1
	}
	k := min(fixed, broken)
	// Sum the binomial tail in logs: n can be in the thousands.
	tail := 0.0
	for i := 0; i <= k; i++ {
		tail += math.Exp(logChoose(n, i) - float64(n)*math.Ln2)
	}
	return math.Min(1, 2*tail)
}

func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

// tCrit975 are Student's t 0.975 quantiles for 1..30 degrees of freedom.
var tCrit975 = []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// MeanCI95 is the mean of the finite values and the half-width of its 95%
// confidence interval (Student's t with n-1 degrees of freedom; NaN for
// fewer than two values). Seeds are the unit: the interval says how far
// another set of seeds could move the mean.
func MeanCI95(v []float64) (mean, half float64) {
	mean, std := MeanStd(v)
	n := 0
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			n++
		}
	}
	if n < 2 {
		return mean, math.NaN()
	}
	t := 1.96
	if n-1 <= len(tCrit975) {
		t = tCrit975[n-2]
	}
	return mean, t * std / math.Sqrt(float64(n))
}
