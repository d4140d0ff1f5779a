package verifiers

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// An extractor finds the final answer in a completion and returns its byte
// span [start, end); ok is false when it finds none. Every extractor takes the
// last occurrence of its marker, since models restate the question and try
// intermediate answers before the final one.
type extractor func(s string) (start, end int, ok bool)

// extractors maps the names accepted in Options.Extractors.
var extractors = map[string]extractor{
	"boxed":        extractBoxed,
	"gsm8k":        extractGSM8K,
	"answer_is":    extractAnswerIs,
	"answer_colon": extractAnswerColon,
	"last_number":  extractLastNumber,
}

// extractorList resolves the extraction priority: names in order, then
// "last_number" when lastNumber is set and it is not already listed.
func extractorList(names []string, lastNumber bool) ([]extractor, error) {
	var list []extractor
	seenLast := false
	for _, n := range names {
		ex, ok := extractors[n]
		if !ok {
			return nil, fmt.Errorf("unknown extractor %q (known: boxed, gsm8k, answer_is, answer_colon, last_number)", n)
		}
		seenLast = seenLast || n == "last_number"
		list = append(list, ex)
	}
	if lastNumber && !seenLast {
		list = append(list, extractLastNumber)
	}
	return list, nil
}

// extractFirst runs the extractors in priority order and returns the span of
// the first one that finds a non-empty answer, trimmed of decoration.
func extractFirst(s string, list []extractor) (start, end int, ok bool) {
	for _, ex := range list {
		if start, end, ok := ex(s); ok {
			if start, end = trimSpan(s, start, end); start < end {
				return start, end, true
			}
		}
	}
	return -1, -1, false
}

// trimSpan shrinks [start, end) past surrounding blanks, markdown bold, math
// dollars and a final full stop or comma, which are not part of an answer.
func trimSpan(s string, start, end int) (int, int) {
	for {
		switch {
		case start < end && strings.IndexByte(" \t\r\n$*", s[start]) >= 0:
			start++
		case start < end && strings.IndexByte(" \t\r\n$*.,;:", s[end-1]) >= 0:
			end--
		case end-start >= 2 && s[start] == '\\' && (s[start+1] == '(' || s[start+1] == '['):
			start += 2
		case end-start >= 2 && s[end-2] == '\\' && (s[end-1] == ')' || s[end-1] == ']'):
			end -= 2
		default:
			return start, end
		}
	}
}

// extractBoxed finds the last \boxed{...} or \fbox{...} with balanced braces
// (or "\boxed 5" without them) and returns the span inside the braces.
func extractBoxed(s string) (int, int, bool) {
	type box struct{ at, end int } // command start and end
	var boxes []box
	for _, name := range []string{`\boxed`, `\fbox`} {
		for off := 0; ; {
			i := strings.Index(s[off:], name)
			if i < 0 {
				break
			}
			boxes = append(boxes, box{off + i, off + i + len(name)})
			off += i + len(name)
		}
	}
	sort.Slice(boxes, func(i, j int) bool { return boxes[i].at < boxes[j].at })
	var closing []int // built on the first unclosed box, so that many stay linear
	for n := len(boxes) - 1; n >= 0; n-- {
		j := boxes[n].end
		k := j
		for k < len(s) && s[k] == ' ' {
			k++
		}
		if k < len(s) && s[k] == '{' {
			c := -1
			if closing == nil {
				if c = matchBrace(s, k); c < 0 {
					closing = closingBraces(s)
				}
			} else {
				c = closing[k]
			}
			if c > 0 {
				return k + 1, c, true
			}
		} else if k > j { // "\boxed 5": up to the next blank or '$'
			e := k
			for e < len(s) && strings.IndexByte(" \t\r\n$", s[e]) < 0 {
				e++
			}
			if e > k {
				return k, e, true
			}
		}
	}
	return -1, -1, false
}

// matchBrace returns the index of the '}' that closes the '{' at open, or -1.
// Escaped braces (\{ \}) are literal and do not count.
func matchBrace(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// closingBraces maps the index of every '{' to that of its '}' (-1 when
// unclosed) in one pass, with matchBrace's rules.
func closingBraces(s string) []int {
	closing := make([]int, len(s))
	var open []int
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			closing[i] = -1
			open = append(open, i)
		case '}':
			if n := len(open); n > 0 {
				closing[open[n-1]] = i
				open = open[:n-1]
			}
		}
	}
	return closing
}

// extractGSM8K takes the rest of the line after the last "####".
func extractGSM8K(s string) (int, int, bool) {
	i := strings.LastIndex(s, "####")
	if i < 0 {
		return -1, -1, false
	}
	start := i + 4
	return start, lineEnd(s, start), true
}

var (
	answerIsRE    = regexp.MustCompile(`(?i)\banswers?\s+(?:is|are|should\s+be|would\s+be|will\s+be|=)\s*:?`)
	answerColonRE = regexp.MustCompile(`(?i)\banswer\**\s*[:：]\**`)
	// lastNumberRE: grouped thousands first so that "1,234" is one number.
	lastNumberRE = regexp.MustCompile(`(?:-|−)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|(?:-|−)?\.\d+`)
)

// extractAnswerIs takes the sentence after the last "the answer is".
func extractAnswerIs(s string) (int, int, bool) {
	return afterLastMatch(s, answerIsRE, sentenceEnd)
}

// extractAnswerColon takes the line after the last "Answer:".
func extractAnswerColon(s string) (int, int, bool) {
	return afterLastMatch(s, answerColonRE, lineEnd)
}

// afterLastMatch returns the text from the end of the last match of re to
// stop(s, start); when that is blank (the answer is on the next line) it
// takes the next non-blank line instead.
func afterLastMatch(s string, re *regexp.Regexp, stop func(string, int) int) (int, int, bool) {
	m := re.FindAllStringIndex(s, -1)
	if len(m) == 0 {
		return -1, -1, false
	}
	start := m[len(m)-1][1]
	end := stop(s, start)
	if strings.TrimSpace(s[start:end]) == "" {
		for start = end; start < len(s) && strings.IndexByte(" \t\r\n", s[start]) >= 0; start++ {
		}
		end = lineEnd(s, start)
	}
	return start, end, true
}

// lineEnd is the index of the newline at or after i, or len(s).
func lineEnd(s string, i int) int {
	if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(s)
}

// sentenceEnd is the end of the line or the first full stop after i that is
// not a decimal point ("3.5") and not inside braces or math ("$x=3.$").
func sentenceEnd(s string, i int) int {
	end := lineEnd(s, i)
	depth, inMath := 0, false
	for j := i; j < end; j++ {
		switch s[j] {
		case '{':
			depth++
		case '}':
			depth--
		case '$':
			inMath = !inMath
		case '.':
			if depth <= 0 && !inMath && (j+1 == end || s[j+1] == ' ' || s[j+1] == '\t') {
				return j
			}
		}
	}
	return end
}

// extractLastNumber takes the last number in the completion (lm-eval's
// "flexible extract"), grouped thousands and simple fractions included.
func extractLastNumber(s string) (int, int, bool) {
	m := lastNumberRE.FindAllStringIndex(s, -1)
	if len(m) == 0 {
		return -1, -1, false
	}
	return m[len(m)-1][0], m[len(m)-1][1], true
}

// extractBareNumber takes a completion that is nothing but one number
// (blanks, `$`, `**` and a final full stop around it allowed): the answer
// given bare, which strict math accepts as a final-answer form.
func extractBareNumber(s string) (int, int, bool) {
	start, end := trimSpan(s, 0, len(s))
	if start < end {
		if m := lastNumberRE.FindStringIndex(s[start:end]); m != nil && m[0] == 0 && m[1] == end-start {
			return start, end, true
		}
	}
	return -1, -1, false
}

// referenceAnswer reduces a reference to its final answer: the last boxed
// expression of a MATH solution or the "#### N" of a GSM8K one; any other
// reference is taken whole.
func referenceAnswer(ref string) string {
	for _, ex := range []extractor{extractBoxed, extractGSM8K} {
		if start, end, ok := ex(ref); ok {
			if start, end = trimSpan(ref, start, end); start < end {
				return ref[start:end]
			}
		}
	}
	return ref
}
