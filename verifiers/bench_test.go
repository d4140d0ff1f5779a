package verifiers

import (
	"context"
	"fmt"
	"testing"
)

// gsm8kCompletions are typical GSM8K chains of thought (a few hundred bytes,
// "#### N" at the end, thousands separators, some wrong).
var gsm8kCompletions = [][2]string{
	{"Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72", "72"},
	{"Weng earns 12/60 = $0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $10.\n#### 10", "10"},
	{"In the beginning, Betty has only 100 / 2 = $50.\nBetty's grandparents gave her 15 * 2 = $30.\nThis means, Betty needs 100 - 50 - 30 - 15 = $5 more.\n#### 5", "5"},
	{"The house cost 80,000 + 50,000 = $130,000.\nThe value rose by 80,000 * 1.5 = $120,000, so it is worth 200,000.\nProfit: 200,000 - 130,000 = 70,000\n#### 70,000", "70000"},
	{"James writes 3*2 = 6 pages a week, so 6*52 = 312 pages a year. The answer is 624.", "624"},
	{"He gets 10*0.5 = 5 extra, so he has 10 + 5 = 15 in total, which is the answer.", "15"},
}

// mathCompletions are MATH-style solutions with LaTeX final answers that
// need normalisation, exact rationals, numeric or symbolic comparison.
var mathCompletions = [][2]string{
	{`We complete the square: $(x-3)^2 + (y+1)^2 = 25$, so the radius is $\boxed{5}$.`, "5"},
	{`The probability is $\frac{6}{36} = \boxed{\dfrac{1}{6}}$.`, `\frac{1}{6}`},
	{`Rationalising, $\frac{6}{\sqrt{3}} = \boxed{2\sqrt{3}}$.`, `2\sqrt3`},
	{`Factoring gives $\boxed{(x-1)(x+1)}$.`, `x^2-1`},
	{`The roots are $x = \frac{1 \pm \sqrt{5}}{2}$, i.e. $\boxed{\frac{1\pm\sqrt5}{2}}$.`, `\frac{1+\sqrt{5}}{2}, \frac{1-\sqrt{5}}{2}`},
	{`So the solution set is $\boxed{(-\infty, -1) \cup (1, \infty)}$.`, `(-\infty,-1)\cup(1,\infty)`},
	{`The point is $\boxed{\left( 3, \frac{\pi}{2} \right)}$.`, `\left(3,\frac{\pi}{2}\right)`},
	{`Thus the area is $\boxed{36\pi \text{ cm}^2}$.`, `36\pi`},
}

func benchmarkMath(b *testing.B, cases [][2]string) {
	v, err := New("math", Options{LastNumber: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range cases { // the benchmark is only meaningful if they are right
		if res, err := v.Verify(ctx, c[0], c[1]); err != nil || !res.Correct {
			b.Fatalf("%q: %+v %v", c[0], res, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := cases[i%len(cases)]
		if _, err := v.Verify(ctx, c[0], c[1]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verifs/s")
}

// BenchmarkMathGSM8K: verifications per second on GSM8K-style completions.
func BenchmarkMathGSM8K(b *testing.B) { benchmarkMath(b, gsm8kCompletions) }

// BenchmarkMathMATH: verifications per second on MATH-style completions.
func BenchmarkMathMATH(b *testing.B) { benchmarkMath(b, mathCompletions) }

// BenchmarkMathRatio runs both sets in one process and prints how much
// longer a MATH-style verification takes than a GSM8K one.
func BenchmarkMathRatio(b *testing.B) {
	perOp := map[string]float64{}
	for _, set := range []struct {
		name  string
		cases [][2]string
	}{{"GSM8K", gsm8kCompletions}, {"MATH", mathCompletions}} {
		b.Run(set.name, func(b *testing.B) {
			benchmarkMath(b, set.cases)
			perOp[set.name] = float64(b.Elapsed()) / float64(b.N) // the last, largest run wins
		})
	}
	if perOp["GSM8K"] > 0 {
		fmt.Printf("MATH-style verification takes %.2fx as long as GSM8K-style\n", perOp["MATH"]/perOp["GSM8K"])
	}
}

// BenchmarkMathCorpus runs the math verifier over every case of the
// labelled suite (testdata/math_cases.jsonl: all kinds of answer, right and
// wrong) and reports the time per case (wall, and CPU of the whole
// process, garbage collection included), and in "agree" the share of
// verdicts that match the labels. To compare two versions of the verifier,
// run this benchmark in both with the same corpus file.
func BenchmarkMathCorpus(b *testing.B) {
	cases := loadMathCases(b)
	v := newMathForTest(b)
	ctx := context.Background()
	agree := 0
	for _, c := range cases {
		res, err := v.Verify(ctx, c.Completion, c.Reference)
		if err != nil {
			b.Fatal(err)
		}
		if res.Correct == c.Correct {
			agree++
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		for _, c := range cases {
			if _, err := v.Verify(ctx, c.Completion, c.Reference); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N * len(cases))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/case")
	if cpu := processCPU() - cpu0; cpu0 > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/case")
	}
	b.ReportMetric(float64(agree)/float64(len(cases)), "agree")
	b.ReportMetric(float64(len(cases)), "cases")
}
