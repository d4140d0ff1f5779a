package reporting

import (
	"regexp"
	"strings"
	"testing"

	"github.com/confclip/confclip/scoring"
)

// TestSummaryPlurals: the summary table says "1 record", "1 group", "1
// fallback" (it said "1 groups"), and plurals for other counts.
func TestSummaryPlurals(t *testing.T) {
	oneS := regexp.MustCompile(`\b1 [a-z-]+s\b`)
	for _, n := range []int{1, 2} {
		s := scoring.Summary{Records: n, Groups: n, In: "in.jsonl", ScopeFallbacks: n, Skipped: scoring.Skipped{Records: n, Groups: n, Reasons: map[string]int{"malformed line": n}}}
		s.Reward.Method = "binary"
		var b strings.Builder
		if err := ScoreTable(&b, s); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		want := []string{"scored 1 record in 1 group", "(1 fallback)", "skipped 1 record (1 group of the wrong size)"}
		if n == 2 {
			want = []string{"scored 2 records in 2 groups", "(2 fallbacks)", "skipped 2 records (2 groups of the wrong size)"}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("no %q in\n%s", w, out)
			}
		}
		if m := oneS.FindString(out); m != "" {
			t.Errorf("%q in\n%s", m, out)
		}
	}
}

// TestScoreTableTextOnly: a summary of text-only records (no tokens
// counted) says so instead of showing token means of 0.
func TestScoreTableTextOnly(t *testing.T) {
	s := scoring.Summary{Records: 2, Groups: 1, In: "in.jsonl"}
	s.Outcomes.Accuracy = 0.5
	var b strings.Builder
	if err := ScoreTable(&b, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "mean tokens: none counted (text-only records)") {
		t.Errorf("text-only records: the table shows token means:\n%s", b.String())
	}
}
