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
//
// Case: Options' zero value compares case-sensitively; the configuration's
// default ([verifier] case_fold, the --case-fold flag) is true, so the
// commands ignore case unless told not to. The reason says which applied
// when case made the difference: "matches the reference, ignoring case", or
// "differs from the reference ... in case only (case_fold is off)".
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
	got, want := v.normalize(res.Extracted), v.normalize(ref)
	switch {
	case got == want:
		res.Score, res.Correct, res.Reason = 1, true, "matches the reference"
		if v.opts.CaseFold && v.withCase(res.Extracted) != v.withCase(ref) {
			res.Reason += ", ignoring case"
		}
	case !v.opts.CaseFold && strings.EqualFold(got, want):
		res.Reason = "differs from the reference " + quote(clip(ref, 80)) + " in case only (case_fold is off)"
	default:
		res.Reason = "differs from the reference " + quote(clip(ref, 80))
	}
	return res, nil
}

// withCase is normalize without case folding.
func (v *exactVerifier) withCase(s string) string {
	o := *v
	o.opts.CaseFold = false
	return o.normalize(s)
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
