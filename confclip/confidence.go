package confclip

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// Confidence scopes (config key confidence.scope).
const (
	// ScopeCompletion averages over every completion token.
	ScopeCompletion = "completion"
	// ScopeAnswer averages over the tokens that overlap the answer the
	// verifier extracted, falling back to ScopeCompletion when there is none.
	ScopeAnswer = "answer"
)

// ConfidenceEstimator turns the per-token quantities of a completion (or of
// its answer span) into one confidence c in [0, 1].
type ConfidenceEstimator struct {
	Name string
	// NeedsEntropies is set when the estimator reads per-token entropies and
	// the vocabulary size instead of log-probabilities.
	NeedsEntropies bool
	// Estimate computes c; logprobs and entropies cover the same tokens.
	Estimate func(logprobs, entropies []float64, vocab int) float64
}

var confidenceEstimators = map[string]ConfidenceEstimator{
	"geo_mean":    {Name: "geo_mean", Estimate: func(l, _ []float64, _ int) float64 { return GeoMean(l) }},
	"arith_mean":  {Name: "arith_mean", Estimate: func(l, _ []float64, _ int) float64 { return ArithMean(l) }},
	"min":         {Name: "min", Estimate: func(l, _ []float64, _ int) float64 { return MinProb(l) }},
	"neg_entropy": {Name: "neg_entropy", NeedsEntropies: true, Estimate: func(_, h []float64, v int) float64 { return NegEntropy(h, v) }},
}

// LookupConfidence returns the estimator registered under a confidence.estimator name.
func LookupConfidence(name string) (ConfidenceEstimator, error) {
	e, ok := confidenceEstimators[name]
	if !ok {
		return ConfidenceEstimator{}, fmt.Errorf("unknown confidence estimator %q (known: %v)", name, ConfidenceNames())
	}
	return e, nil
}

// ConfidenceNames lists the confidence.estimator names, sorted.
func ConfidenceNames() []string { return sortedKeys(confidenceEstimators) }

// ScopeNames lists the confidence.scope names.
func ScopeNames() []string { return []string{ScopeAnswer, ScopeCompletion} }

// CheckScope reports whether name is a confidence.scope.
func CheckScope(name string) error {
	if !slices.Contains(ScopeNames(), name) {
		return fmt.Errorf("unknown confidence scope %q (known: %v)", name, ScopeNames())
	}
	return nil
}

// logProb cleans one token log-probability: NaN counts as -Inf (no support)
// and positive values, which only rounding produces, count as 0.
func logProb(l float64) float64 {
	switch {
	case math.IsNaN(l):
		return math.Inf(-1)
	case l > 0:
		return 0
	}
	return l
}

// GeoMean is the geometric mean of the token probabilities,
//
//	c = exp( (1/|S|) Σ_{t∈S} l_t ),
//
// the per-token probability of the whole sequence (length-normalised
// sequence likelihood). An empty S gives 1, the probability of the empty
// sequence; any -Inf log-prob gives 0.
func GeoMean(logprobs []float64) float64 {
	if len(logprobs) == 0 {
		return 1
	}
	var s float64
	for _, l := range logprobs {
		s += logProb(l)
	}
	return math.Exp(s / float64(len(logprobs)))
}

// ArithMean is the arithmetic mean of the token probabilities,
//
//	c = (1/|S|) Σ_{t∈S} exp(l_t).
//
// An empty S gives 1.
func ArithMean(logprobs []float64) float64 {
	if len(logprobs) == 0 {
		return 1
	}
	var s float64
	for _, l := range logprobs {
		s += math.Exp(logProb(l))
	}
	return min(s/float64(len(logprobs)), 1)
}

// MinProb is the probability of the least likely token,
//
//	c = min_{t∈S} exp(l_t).
//
// An empty S gives 1.
func MinProb(logprobs []float64) float64 {
	m := 0.0
	for _, l := range logprobs {
		m = min(m, logProb(l))
	}
	return math.Exp(m)
}

// NegEntropy is one minus the mean entropy normalised by its maximum,
//
//	c = 1 - (1/|S|) Σ_{t∈S} H_t / log V,
//
// with H_t in nats and V the vocabulary size. Entropies outside [0, log V]
// (or NaN, counted as log V) are clamped; an empty S or V < 2 gives 1.
func NegEntropy(entropies []float64, vocab int) float64 {
	if len(entropies) == 0 || vocab < 2 {
		return 1
	}
	hmax := math.Log(float64(vocab))
	var s float64
	for _, h := range entropies {
		if math.IsNaN(h) {
			h = hmax
		}
		s += clamp(h, 0, hmax)
	}
	return clamp(1-s/float64(len(entropies))/hmax, 0, 1)
}

// AnswerTokens maps a byte span [start, end) of a completion's text onto the
// half-open token range [lo, hi) of the tokens that overlap it. offsets[i] is
// the byte where token i's piece starts (non-decreasing); token i ends where
// token i+1 starts, the last one at textLen. ok is false when the span is
// empty or invalid, or when no token overlaps it.
func AnswerTokens(offsets []int, textLen, start, end int) (lo, hi int, ok bool) {
	n := len(offsets)
	if start < 0 || end <= start || n == 0 {
		return 0, 0, false
	}
	tokEnd := func(i int) int {
		if i+1 < n {
			return offsets[i+1]
		}
		return max(textLen, offsets[i])
	}
	// Token i overlaps the span iff offsets[i] < end and tokEnd(i) > start;
	// both bounds are monotone in i, so the overlap is one range.
	lo = sort.Search(n, func(i int) bool { return tokEnd(i) > start })
	hi = sort.Search(n, func(i int) bool { return offsets[i] >= end })
	return lo, hi, hi > lo
}
