package verifiers

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

func init() { Register("math", newMath) }

// mathVerifier checks a final mathematical answer, in the manner of
// HF Math-Verify, verl's math reward and lm-eval-harness's extractors:
// extract (extract.go), normalise (mathnorm.go), then compare exactly for
// rationals, numerically for irrationals and at random points for
// expressions in variables (mathequal.go).
type mathVerifier struct {
	opts       Options
	extractors []extractor
}

func newMath(opts Options) (Verifier, error) {
	names, lastNumber := opts.Extractors, opts.LastNumber
	if opts.strict() {
		names, lastNumber = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "last_number" }), false
	}
	list, err := extractorList(names, lastNumber)
	if err != nil {
		return nil, fmt.Errorf("math: %w", err)
	}
	if opts.strict() {
		list = append(list, extractBareNumber)
	}
	return &mathVerifier{opts: opts, extractors: list}, nil
}

// Verify implements Verifier. The reference may be a bare answer, LaTeX, a
// MATH solution with a \boxed answer or a GSM8K solution ending "#### N".
func (m *mathVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, m.opts, completion, reference, m.check)
}

func (m *mathVerifier) check(ctx context.Context, completion, reference string) (Result, error) {
	start, end, ok := extractFirst(completion, m.extractors)
	if !ok {
		return noAnswer("no answer found"), nil
	}
	res := Result{Extracted: completion[start:end], Start: start, End: end}
	ref := referenceAnswer(reference)
	res.Correct = mathEqual(ctx, res.Extracted, ref, m.opts.RelTol, m.opts.AbsTol)
	if err := ctx.Err(); err != nil {
		return noAnswer(""), err
	}
	if res.Correct {
		res.Score = 1
		res.Reason = "equivalent to the reference"
	} else {
		res.Reason = fmt.Sprintf("not equivalent to the reference %q", clip(ref, 80))
	}
	return res, nil
}

// maxAnswerBytes bounds the answers that are parsed; real final answers are
// far shorter, and longer ones are compared as text.
const maxAnswerBytes = 4 << 10

// mathEqual reports whether two answers are mathematically the same.
func mathEqual(ctx context.Context, a, b string, relTol, absTol float64) bool {
	if len(a) > maxAnswerBytes || len(b) > maxAnswerBytes {
		return strings.TrimSpace(a) == strings.TrimSpace(b)
	}
	na, nb := normalizeMath(a), normalizeMath(b)
	if na == "" || nb == "" {
		return false
	}
	if canonText(na) == canonText(nb) {
		return true
	}
	c := &comparer{ctx: ctx, relTol: relTol, absTol: absTol}
	return c.equal(parseValue(na, 0), parseValue(nb, 0))
}

// clip shortens s for a reason string.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return capBytes(s, n) + "…"
}
