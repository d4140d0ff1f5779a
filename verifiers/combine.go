package verifiers

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Weighted is a verifier with its weight in a combination.
type Weighted struct {
	Verifier
	Weight float64
}

// Combine returns a verifier whose score is the weighted mean of the
// scores of vs, sum(w_i·score_i) / sum(w_i), as TRL sums reward functions.
// The first verifier is the primary one: Correct, Extracted and the span
// are its own. Weights must be non-negative with a positive sum. An error
// from any verifier is the combination's error.
func Combine(vs ...Weighted) (Verifier, error) {
	if len(vs) == 0 {
		return nil, errors.New("combine: no verifiers")
	}
	sum := 0.0
	for i, w := range vs {
		if w.Verifier == nil || w.Weight < 0 || w.Weight != w.Weight {
			return nil, fmt.Errorf("combine: verifier %d: need a verifier and a weight >= 0", i)
		}
		sum += w.Weight
	}
	if sum <= 0 {
		return nil, errors.New("combine: the weights sum to 0")
	}
	return combined{vs: vs, sum: sum}, nil
}

type combined struct {
	vs  []Weighted
	sum float64
}

// Verify implements Verifier.
func (c combined) Verify(ctx context.Context, completion, reference string) (Result, error) {
	var primary Result
	score := 0.0
	reasons := make([]string, len(c.vs))
	for i, w := range c.vs {
		r, err := w.Verify(ctx, completion, reference)
		if err != nil {
			return noAnswer(""), err
		}
		if i == 0 {
			primary = r
		}
		score += w.Weight * r.Score
		reasons[i] = fmt.Sprintf("%.3g×%.3g (%s)", w.Weight, r.Score, r.Reason)
	}
	primary.Score = score / c.sum
	primary.Reason = strings.Join(reasons, "; ")
	return primary, nil
}
