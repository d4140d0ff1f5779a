package verifiers

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
)

func init() { Register("choice", newChoice) }

// choiceVerifier checks a multiple-choice letter (A to J). Patterns are
// tried in order and the last match of the first pattern that matches wins:
//
//	\boxed{B}, \boxed{\text{(B)}}
//	"answer is (B)", "Answer: B", "answer is b)"
//	"(B)" anywhere
//	"B)" "B." "B:" at the start of a line ("B. Paris")
//	the whole completion is one letter
//
// A bare capital is only taken with such a marker, since "A" and "I" are
// also words. The reference is a letter in any of these forms.
type choiceVerifier struct{ opts Options }

func newChoice(opts Options) (Verifier, error) { return &choiceVerifier{opts: opts}, nil }

// choicePatterns capture the letter in group 1.
var choicePatterns = []*regexp.Regexp{
	regexp.MustCompile(`\\boxed\{\s*(?:\\text(?:bf)?\{\s*)?\(?([A-Ja-j])\)?\s*\}?\s*\}`),
	regexp.MustCompile(`(?i:answer)(?:\s+(?:is|would\s+be|should\s+be))?\s*(?:[:：]\s*)?\**\s*(?:\(([A-Ja-j])\)|([A-J])\b|([a-j])\))`),
	regexp.MustCompile(`\(([A-J])\)`),
	regexp.MustCompile(`(?m)^[\s*#>-]*([A-J])[).:](?:\s|$)`),
	regexp.MustCompile(`^\s*\(?([A-Ja-j])\)?[.\s]*$`),
}

// findChoice returns the span of the chosen letter, or ok false.
func findChoice(s string) (start, end int, ok bool) {
	for _, re := range choicePatterns {
		m := re.FindAllStringSubmatchIndex(s, -1)
		if len(m) == 0 {
			continue
		}
		last := m[len(m)-1]
		for g := 1; 2*g+1 < len(last); g++ {
			if last[2*g] >= 0 {
				return last[2*g], last[2*g+1], true
			}
		}
	}
	return -1, -1, false
}

// Verify implements Verifier.
func (v *choiceVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, v.opts, completion, reference, v.check)
}

func (v *choiceVerifier) check(_ context.Context, completion, reference string) (Result, error) {
	rs, re, ok := findChoice(reference)
	if !ok {
		return noAnswer(""), fmt.Errorf("choice: the reference %q names no option letter A-J", clip(reference, 80))
	}
	want := upper(reference[rs:re])
	start, end, ok := findChoice(completion)
	if !ok {
		return noAnswer("no option letter found"), nil
	}
	res := Result{Extracted: completion[start:end], Start: start, End: end}
	if upper(res.Extracted) == want {
		res.Score, res.Correct, res.Reason = 1, true, "chose the reference option "+want
	} else {
		res.Reason = "chose " + upper(res.Extracted) + ", the reference is " + want
	}
	return res, nil
}

func upper(s string) string {
	if len(s) == 1 && s[0] >= 'a' && s[0] <= 'z' {
		return string(s[0] - 'a' + 'A')
	}
	return s
}

func quote(s string) string { return strconv.Quote(s) }
