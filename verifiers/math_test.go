package verifiers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// mathCase is one labelled line of testdata/math_cases.jsonl.
type mathCase struct {
	Category   string `json:"category"`
	Reference  string `json:"reference"`
	Completion string `json:"completion"`
	Correct    bool   `json:"correct"`
	Reason     string `json:"reason,omitempty"` // why the verdict is what it is
	// Truncated: the length limit cut the completion off (NewTruncated);
	// Strict: the verifier has Options.Strict.
	Truncated bool `json:"truncated,omitempty"`
	Strict    bool `json:"strict,omitempty"`
}

func loadMathCases(t testing.TB) []mathCase {
	t.Helper()
	f, err := os.Open("testdata/math_cases.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []mathCase
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		var c mathCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("testdata/math_cases.jsonl:%d: %v", line, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func newMathForTest(t testing.TB) Verifier {
	t.Helper()
	v, err := New("math", Options{LastNumber: true})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMathSuite runs the labelled suite and reports precision and recall
// (of the verdict "correct") per category; any miss fails the test.
func TestMathSuite(t *testing.T) {
	cases := loadMathCases(t)
	if len(cases) < 800 {
		t.Fatalf("suite has %d cases, want at least 800", len(cases))
	}
	// A category that gives reasons gives one for every verdict.
	reasoned := map[string]bool{}
	for _, c := range cases {
		reasoned[c.Category] = reasoned[c.Category] || c.Reason != ""
	}
	for i, c := range cases {
		if reasoned[c.Category] && c.Reason == "" {
			t.Errorf("line %d (%s): no reason for the verdict", i+1, c.Category)
		}
	}
	v := newMathForTest(t)
	truncated, err := NewTruncated("math", Options{LastNumber: true})
	if err != nil {
		t.Fatal(err)
	}
	strict, err := New("math", Options{LastNumber: true, Strict: new(true)})
	if err != nil {
		t.Fatal(err)
	}
	type counts struct{ tp, fp, fn, tn int }
	per := map[string]*counts{}
	var total counts
	for i, c := range cases {
		vc := v
		if c.Truncated {
			vc = truncated
		} else if c.Strict {
			vc = strict
		}
		res, err := vc.Verify(context.Background(), c.Completion, c.Reference)
		if err != nil {
			t.Errorf("case %d (%s): %v", i+1, c.Category, err)
			continue
		}
		k := per[c.Category]
		if k == nil {
			k = &counts{}
			per[c.Category] = k
		}
		for _, k := range []*counts{k, &total} {
			switch {
			case res.Correct && c.Correct:
				k.tp++
			case res.Correct:
				k.fp++
			case c.Correct:
				k.fn++
			default:
				k.tn++
			}
		}
		if res.Correct != c.Correct {
			t.Errorf("line %d (%s): reference %q, completion %q: got correct=%v (extracted %q, %s), want %v",
				i+1, c.Category, c.Reference, c.Completion, res.Correct, res.Extracted, res.Reason, c.Correct)
		}
	}
	ratio := func(a, b int) string {
		if b == 0 {
			return "   -  "
		}
		return fmt.Sprintf("%5.1f%%", 100*float64(a)/float64(b))
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s %5s %5s %9s %7s\n", "category", "pos", "neg", "precision", "recall")
	for _, n := range append(names, "TOTAL") {
		k := per[n]
		if n == "TOTAL" {
			k = &total
		}
		fmt.Fprintf(&b, "%-24s %5d %5d %9s %7s\n", n, k.tp+k.fn, k.fp+k.tn, ratio(k.tp, k.tp+k.fp), ratio(k.tp, k.tp+k.fn))
	}
	t.Logf("math suite, %d cases:\n%s", len(cases), b.String())
}

// TestMathSpan checks that the span points at the extracted text in the
// original completion.
func TestMathSpan(t *testing.T) {
	v := newMathForTest(t)
	for _, tc := range []struct{ completion, want string }{
		{`So the answer is $\boxed{\frac{1}{2}}$.`, `\frac{1}{2}`},
		{"Natalia sold 72 clips.\n#### 72", "72"},
		{"The answer is $3.5$. Bye", "3.5"},
		{"**Answer:** 17\n", "17"},
		{"so 1,234 in all", "1,234"},
		{"—the answer is ∞.", "∞"},
	} {
		res, err := v.Verify(context.Background(), tc.completion, "0")
		if err != nil {
			t.Fatal(err)
		}
		if res.Extracted != tc.want || res.Start < 0 || tc.completion[res.Start:res.End] != tc.want {
			t.Errorf("%q: extracted %q at [%d,%d), want %q", tc.completion, res.Extracted, res.Start, res.End, tc.want)
		}
	}
	res, _ := v.Verify(context.Background(), "no idea", "1")
	if res.Start != -1 || res.End != -1 || res.Extracted != "" || res.Score != 0 {
		t.Errorf("no answer: got %+v", res)
	}
}

// TestMathOptions covers the extractor options.
func TestMathOptions(t *testing.T) {
	ctx := context.Background()
	noLast, _ := New("math", Options{LastNumber: false})
	if res, _ := noLast.Verify(ctx, "it is 42", "42"); res.Correct {
		t.Error("LastNumber=false still took the last number")
	}
	onlyGSM, _ := New("math", Options{Extractors: []string{"gsm8k"}})
	if res, _ := onlyGSM.Verify(ctx, `\boxed{5}`+"\n#### 6", "6"); !res.Correct {
		t.Errorf("extractors=[gsm8k]: %+v", res)
	}
	if _, err := New("math", Options{Extractors: []string{"boxd"}}); err == nil {
		t.Error("unknown extractor accepted")
	}
	strict, _ := New("math", Options{RelTol: 1e-12})
	if res, _ := strict.Verify(ctx, `\boxed{1.41421356}`, `\sqrt{2}`); res.Correct {
		t.Error("RelTol=1e-12 accepted 1.41421356 for sqrt(2)")
	}
}

// TestMathAbsTol: near 0 the relative tolerance cannot help (it scales
// with the values), so abs_tol decides: sqrt(2) - 1.41421 is 3.6e-6, 0 at
// an absolute tolerance of 1e-5, not at the default 1e-12; sin(pi), which
// floating point computes as 1.2e-16, is 0 at the default.
func TestMathAbsTol(t *testing.T) {
	ctx := context.Background()
	near := `\boxed{\sqrt{2}-1.41421}`
	def, _ := New("math", Options{})
	if res, _ := def.Verify(ctx, near, "0"); res.Correct {
		t.Error("default abs_tol accepted sqrt(2)-1.41421 for 0")
	}
	if res, _ := def.Verify(ctx, `\boxed{\sin(\pi)}`, "0"); !res.Correct {
		t.Error("default abs_tol refused sin(pi) for 0")
	}
	loose, _ := New("math", Options{AbsTol: 1e-5})
	if res, _ := loose.Verify(ctx, near, "0"); !res.Correct {
		t.Error("AbsTol=1e-5 refused sqrt(2)-1.41421 for 0")
	}
	if res, _ := loose.Verify(ctx, `\boxed{\sqrt{2}-1.414}`, "0"); res.Correct {
		t.Error("AbsTol=1e-5 accepted sqrt(2)-1.414 (2.1e-4) for 0")
	}
}

// TestMathLimits feeds hostile inputs; each must finish fast with a verdict.
func TestMathLimits(t *testing.T) {
	v := newMathForTest(t)
	deep := strings.Repeat(`\frac{`, 5000) + "1" + strings.Repeat("}{2}", 5000)
	hostile := []struct{ name, completion, reference string }{
		{"deep braces", `\boxed{` + deep + `}`, "1"},
		{"deep parens", `\boxed{` + strings.Repeat("(", 100000) + `}`, "1"},
		{"huge power", `\boxed{10^{10^{10^{10}}}}`, "10^{10^{10^{10}}}+1"},
		{"huge factorial", `\boxed{100000000!}`, "1"},
		{"tower", `\boxed{2^2^2^2^2^2^2^2^2}`, "1"},
		{"long number", `\boxed{` + strings.Repeat("9", 60000) + `}`, "1"},
		{"many boxes", strings.Repeat(`\boxed{1}`, 20000), "1"},
		{"many pm", `\boxed{` + strings.Repeat(`\pm 1`, 5000) + `}`, "1"},
		{"long set", `\boxed{` + strings.Repeat("1,", 30000) + `1}`, "1"},
		{"unbalanced", strings.Repeat(`\boxed{\frac{`, 10000), "1"},
		{"big exp literal", `\boxed{1e999999999}`, "1"},
		{"huge input", strings.Repeat("x", 10<<20), "1"},
		{"long period", `\boxed{0.\overline{` + strings.Repeat("9", 5000) + `}}`, "1"},
		{"many periods", `\boxed{` + strings.Repeat(`0.\overline{3}+`, 5000) + `0}`, "1"},
		{"huge power of i", `\boxed{i^{10^{400}}}`, "1"},
		{"huge complex power", `\boxed{(1+i)^{100000}}`, "(1+i)^{99999}"},
		{"long chain", `\boxed{` + strings.Repeat("x < ", 10000) + `1}`, strings.Repeat("1 > ", 10000) + "x"},
		{"many relations", `\boxed{` + strings.Repeat("x < 1 or ", 5000) + `x < 1}`, "x<1"},
	}
	for _, h := range hostile {
		start := time.Now()
		res, err := v.Verify(context.Background(), h.completion, h.reference)
		if err != nil {
			t.Errorf("%s: %v", h.name, err)
		}
		d := time.Since(start)
		if d > time.Second {
			t.Errorf("%s: took %v", h.name, d)
		}
		t.Logf("%s: %v (%s)", h.name, d, res.Reason)
		if res.Score < 0 || res.Score > 1 {
			t.Errorf("%s: score %v", h.name, res.Score)
		}
	}
}

// TestMathCancelled: a done context is an error, not a verdict.
func TestMathCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newMathForTest(t).Verify(ctx, `\boxed{1}`, "1"); err == nil {
		t.Error("cancelled context gave no error")
	}
}

// FuzzMath checks that no input crashes or hangs the math verifier, that
// the score is in [0, 1] and that the span lies inside the completion.
// Run: go test -run=^$ -fuzz=FuzzMath -fuzztime=60s ./verifiers
func FuzzMath(f *testing.F) {
	for _, c := range loadMathCases(f) {
		f.Add(c.Completion, c.Reference)
	}
	for _, s := range []string{`\boxed{\frac{\sqrt{`, `\left(\right]`, `x^{-}`, `\pm\mp\pm`, `#### `, `1e-`, `\sqrt[0]{0}`, `0^{-1}`, `|||`, `\binom{-1}{2}`,
		`0.\overline{`, `0.(`, `.\dot{1}2\dot`, `x<<>>=`, `\sqrt{-0}`, `i^{-99999999999}`, `1 \le x \ne 2`, `(1+i)^{-3}`} {
		f.Add(s, s)
	}
	v := newMathForTest(f)
	f.Fuzz(func(t *testing.T, completion, reference string) {
		start := time.Now()
		res, err := v.Verify(context.Background(), completion, reference)
		if err != nil {
			t.Fatalf("error: %v", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("took %v", d)
		}
		if !(res.Score >= 0 && res.Score <= 1) {
			t.Fatalf("score %v", res.Score)
		}
		if res.Start == -1 && res.End == -1 {
			return
		}
		if res.Start < 0 || res.End < res.Start || res.End > len(completion) || completion[res.Start:res.End] != res.Extracted {
			t.Fatalf("span [%d,%d) does not hold %q in a completion of %d bytes", res.Start, res.End, res.Extracted, len(completion))
		}
	})
}
