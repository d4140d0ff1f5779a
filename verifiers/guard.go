package verifiers

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// checkFunc is the body of a verifier, called by guarded with its inputs
// already capped and its context carrying the per-verification deadline.
type checkFunc func(ctx context.Context, completion, reference string) (Result, error)

// noAnswer is the result when nothing was extracted.
func noAnswer(reason string) Result { return Result{Start: -1, End: -1, Reason: reason} }

// guarded applies the limits every verifier shares, so that no input can
// crash or hang one:
//   - completion and reference are capped to opts.MaxBytes (at a rune boundary);
//   - the check runs under opts.Timeout() on top of ctx. When that timeout (and
//     not the caller's ctx) expires, the verdict is score 0 with Reason
//     "timeout after ..." and no error: a completion that makes the checker
//     run out of time is a wrong answer, not a bad record. When the caller's
//     ctx ends, its error is returned;
//   - a panic becomes an error instead of killing the pipeline;
//   - the score is clamped to [0, 1] and the span checked against the input.
func guarded(ctx context.Context, opts Options, completion, reference string, check checkFunc) (res Result, err error) {
	if err := ctx.Err(); err != nil {
		return noAnswer(""), err
	}
	completion = capBytes(completion, opts.MaxBytes)
	reference = capBytes(reference, opts.MaxBytes)
	tctx, cancel := context.WithTimeout(ctx, opts.Timeout())
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			res, err = noAnswer(""), fmt.Errorf("verifiers: internal error on this input (a bug, please report it): %v", p)
		}
	}()
	res, err = check(tctx, completion, reference)
	if err != nil {
		if ctx.Err() != nil {
			return noAnswer(""), ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) && tctx.Err() != nil {
			return noAnswer(fmt.Sprintf("timeout after %v", opts.Timeout())), nil
		}
		return res, err
	}
	res.Score = min(max(res.Score, 0), 1)
	if res.Score != res.Score { // NaN
		res.Score = 0
	}
	if res.Start < 0 || res.End < res.Start || res.End > len(completion) {
		res.Start, res.End = -1, -1
	}
	return res, nil
}

// capBytes cuts s to at most n bytes without splitting a UTF-8 sequence.
func capBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
