package verifiers

import (
	"context"
	"strings"
	"unicode"
)

func init() { Register("exact", newExact) }

// exactVerifier compares the final answer with the reference as strings,
// after normalisation: blanks collapsed, and optionally case folded
// (Options.CaseFold) and punctuation removed (Options.IgnorePunct). The
// answer is found with the math extractors ("The answer is Paris." gives
// "Paris"); with none matching, the whole completion is the answer.
type exactVerifier struct {
	opts       Options
	extractors []extractor
}

func newExact(opts Options) (Verifier, error) {
	list, err := extractorList(opts.Extractors, false)
	if err != nil {
		return nil, err
	}
	return &exactVerifier{opts: opts, extractors: list}, nil
}

// Verify implements Verifier.
func (v *exactVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, v.opts, completion, reference, v.check)
}

func (v *exactVerifier) check(_ context.Context, completion, reference string) (Result, error) {
	start, end, ok := extractFirst(completion, v.extractors)
	if !ok {
		start, end = trimSpan(completion, 0, len(completion))
	}
	if start >= end {
		return noAnswer("empty completion"), nil
	}
	res := Result{Extracted: completion[start:end], Start: start, End: end}
	ref := referenceAnswer(reference)
	if v.normalize(res.Extracted) == v.normalize(ref) {
		res.Score, res.Correct, res.Reason = 1, true, "matches the reference"
	} else {
		res.Reason = "differs from the reference " + quote(clip(ref, 80))
	}
	return res, nil
}

func (v *exactVerifier) normalize(s string) string {
	if v.opts.IgnorePunct {
		s = strings.Map(func(r rune) rune {
			if unicode.IsPunct(r) || unicode.IsSymbol(r) {
				return ' '
			}
			return r
		}, s)
	}
	if v.opts.CaseFold {
		s = strings.ToLower(s)
	}
	return strings.Join(strings.Fields(s), " ")
}
