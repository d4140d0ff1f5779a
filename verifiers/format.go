package verifiers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

func init() { Register("format", newFormat) }

// formatVerifier scores the shape of a completion, not its content: it must
// match a regular expression (Options.Pattern, RE2 syntax, searched
// unanchored: use ^...$ and (?s) for a whole-text match) and/or be one JSON
// value (Options.JSON; a ```json fence around it is allowed). Score 1 when
// every check passes, else 0.
//
// The span is the pattern's group named "answer", else its first group,
// else the whole match; for JSON alone, the JSON value.
type formatVerifier struct {
	opts Options
	re   *regexp.Regexp
}

func newFormat(opts Options) (Verifier, error) {
	if opts.Pattern == "" && !opts.JSON {
		return nil, errors.New("format: set a pattern (verifier.pattern) or json = true")
	}
	v := &formatVerifier{opts: opts}
	if opts.Pattern != "" {
		re, err := regexp.Compile(opts.Pattern)
		if err != nil {
			return nil, fmt.Errorf("format: pattern: %w", err)
		}
		v.re = re
	}
	return v, nil
}

// Verify implements Verifier.
func (v *formatVerifier) Verify(ctx context.Context, completion, reference string) (Result, error) {
	return guarded(ctx, v.opts, completion, reference, v.check)
}

func (v *formatVerifier) check(_ context.Context, completion, _ string) (Result, error) {
	start, end := -1, -1
	if v.opts.JSON {
		start, end = jsonSpan(completion)
		if !json.Valid([]byte(completion[start:end])) {
			return noAnswer("not a JSON value"), nil
		}
	}
	if v.re != nil {
		m := v.re.FindStringSubmatchIndex(completion)
		if m == nil {
			return noAnswer("does not match the pattern"), nil
		}
		g := 0
		if i := v.re.SubexpIndex("answer"); i > 0 && m[2*i] >= 0 {
			g = i
		} else if len(m) > 2 && m[2] >= 0 {
			g = 1
		}
		start, end = m[2*g], m[2*g+1]
	}
	return Result{Score: 1, Correct: true, Extracted: completion[start:end], Start: start, End: end, Reason: "well formed"}, nil
}

// jsonSpan is the completion without surrounding blanks and code fence.
func jsonSpan(s string) (int, int) {
	start, end := 0, len(s)
	trim := func() {
		for start < end && strings.IndexByte(" \t\r\n", s[start]) >= 0 {
			start++
		}
		for end > start && strings.IndexByte(" \t\r\n", s[end-1]) >= 0 {
			end--
		}
	}
	trim()
	if strings.HasPrefix(s[start:end], "```") && end-start >= 6 && strings.HasSuffix(s[start:end], "```") {
		if nl := strings.IndexByte(s[start:end], '\n'); nl >= 0 {
			start, end = start+nl+1, end-3
			trim()
		}
	}
	return start, end
}
