package verifiers

import (
	"strings"
	"testing"
)

// TestNormalizeSkips checks that each cheap test normalizeMath uses to skip
// a rewriting step only skips it where the step would change nothing, on
// every text of the labelled suite and on a few written for it.
func TestNormalizeSkips(t *testing.T) {
	texts := []string{`1\,000`, `1{,}000`, `1\ 000`, `\left(1\right)`, `\bigl(2\bigr)`, `\Big|x\Big|`, "3 1/2", "-3 1/2",
		"1,234", "1 234", "0.(3)", "0.12(34)", `0.\overline{3}`, `\begin{pmatrix}1\\2\end{pmatrix}`, "x\u00a0=\u00a03", "−5", "$5$", "a~b"}
	for _, c := range loadMathCases(t) {
		texts = append(texts, c.Completion, c.Reference, normalizeMath(c.Completion), normalizeMath(c.Reference))
	}
	steps := []struct {
		name string
		skip func(string) bool
		run  func(string) string
	}{
		{"unicode", isASCII, unicodeReplacer.Replace},
		{"matrices", func(s string) bool { return !containsAny(s, `\begin`) }, rewriteMatrices},
		{"thin thousands", func(s string) bool { return !containsAny(s, `\,`, `{,}`, `\ `) },
			func(s string) string { return thinThousandsRE.ReplaceAllString(s, "$1$2") }},
		{"sizing", func(s string) bool { return !containsAny(s, `\left`, `\right`, `\big`, `\Big`) },
			func(s string) string { return sizingRE.ReplaceAllString(s, "") }},
		{"latex", func(s string) bool { return !containsAny(s, `\`, "$", "~", "\n", "\t", "\r") }, latexReplacer.Replace},
		{"mixed number", func(s string) bool { return !containsAny(s, "/") || !containsAny(s, " ") },
			func(s string) string { return mixedNumberRE.ReplaceAllString(s, "$1($2+$3/$4)") }},
		{"thousands", func(s string) bool { return !hasDigitGroup(s) }, func(s string) string { return thousandsRE.ReplaceAllString(s, "") }},
		{"repeating", func(s string) bool {
			return !strings.Contains(s, ".") || !containsAny(s, `\overline`, `\bar`, `\dot`) && !hasDecimalBracket(s)
		}, func(s string) string {
			mark := func(m string) string { return m + "!" }
			return repeatingDotRE.ReplaceAllStringFunc(repeatingRE.ReplaceAllStringFunc(s, mark), mark)
		}},
	}
	for _, st := range steps {
		skipped := 0
		for _, s := range texts {
			if !st.skip(s) {
				continue
			}
			skipped++
			if got := st.run(s); got != s {
				t.Errorf("%s: skipped %q, which the step changes to %q", st.name, s, got)
			}
		}
		if skipped == len(texts) {
			t.Errorf("%s: every text skipped; the sample does not exercise the step", st.name)
		}
	}
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
