package tasks

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/verifiers"
)

// modelChars is modelgen.Chars, the tiny model's single-character pieces,
// copied because modelgen needs cgo and these tests must not; texts may
// also hold spaces.
const modelChars = "0123456789+-*/=()<>.,:;?!'\"#$%abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func TestGenerateDeterministic(t *testing.T) {
	a := Generate(1, 500, Options{})
	b := Generate(1, 500, Options{})
	if len(a) != 500 {
		t.Fatalf("got %d problems, want 500", len(a))
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with seed 1 differ")
	}
	c := Generate(2, 500, Options{})
	same := 0
	for i := range a {
		if a[i].Prompt == c[i].Prompt {
			same++
		}
	}
	if same > 50 {
		t.Fatalf("seeds 1 and 2 share %d of 500 prompts at the same index", same)
	}
	if prefix := Generate(1, 200, Options{}); !reflect.DeepEqual(prefix, a[:200]) {
		t.Fatal("a smaller n is not a prefix of a larger one")
	}
}

func TestGenerateOps(t *testing.T) {
	counts := map[Op]int{}
	for _, p := range Generate(3, 2000, Options{}) {
		counts[p.Op]++
	}
	for _, op := range AllOps {
		if counts[op] < 350 {
			t.Errorf("%s: %d of 2000 problems, want about 500", op, counts[op])
		}
	}
	for _, p := range Generate(3, 100, Options{Ops: []Op{Mul}, MaxOperand: 12}) {
		a, b := operands(t, p)
		if p.Op != Mul || a > 9 || b > 12 {
			t.Errorf("%s: want a product within the bounds", p.Prompt)
		}
	}
}

func TestGenerateSmallSpace(t *testing.T) {
	// 2 ops x few operands: far fewer than 1000 distinct problems exist.
	ps := Generate(1, 1000, Options{Ops: []Op{Add, Sub}, MaxOperand: 3})
	if len(ps) == 0 || len(ps) >= 1000 {
		t.Fatalf("got %d problems, want the few distinct ones", len(ps))
	}
}

func TestOptionsValidate(t *testing.T) {
	if _, err := ParseOps("add, mul"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseOps("add,div"); err == nil || !strings.Contains(err.Error(), `"div"`) {
		t.Fatalf("ParseOps(add,div): %v, want an error naming div", err)
	}
	if err := (Options{MaxOperand: 1}).Validate(); err == nil {
		t.Fatal("MaxOperand 1 accepted")
	}
}

// TestAnswersAndSolutions recomputes every answer, checks that every stage
// of the worked solutions evaluates to it, and that the math verifier
// accepts every solution and rejects it against a wrong answer.
func TestAnswersAndSolutions(t *testing.T) {
	v, err := verifiers.New(Verifier, verifiers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := 0
	for _, p := range Generate(7, 2000, Options{}) {
		a, b := operands(t, p)
		var want int
		switch {
		case strings.Contains(p.Prompt, "+") || strings.Contains(p.Prompt, "more"):
			want = a + b
		case strings.Contains(p.Prompt, "-") || strings.Contains(p.Prompt, "away"):
			want = a - b
		default:
			want = a * b
		}
		if p.Answer != strconv.Itoa(want) || want < 0 || len(p.Answer) > 3 {
			t.Fatalf("%s: answer %s, want %d (at most 3 digits)", p.Prompt, p.Answer, want)
		}
		if n := len(p.Solutions); n < 2 || !strings.HasPrefix(p.Solutions[n-1], " ####") {
			t.Fatalf("%s: solutions %q, want at least two, the last bare", p.Prompt, p.Solutions)
		}
		for i, sol := range p.Solutions {
			if i > 0 && len(sol) >= len(p.Solutions[i-1]) {
				t.Errorf("%s: solutions not longest first: %q", p.Prompt, p.Solutions)
			}
			work, final, ok := strings.Cut(sol, "####")
			if !ok || strings.TrimSpace(final) != p.Answer {
				t.Fatalf("%q: want it to end #### %s", sol, p.Answer)
			}
			if work = strings.TrimSuffix(strings.TrimSpace(work), "."); work != "" {
				stages := strings.Split(work, " = ")
				steps += len(stages) - 2
				for _, st := range stages {
					if got := eval(t, st); got != want {
						t.Errorf("%q: stage %q is %d, want %d", sol, st, got, want)
					}
				}
			}
			res, err := v.Verify(ctx, sol, p.Answer)
			if err != nil || !res.Correct {
				t.Errorf("%q against %s: %+v, %v", sol, p.Answer, res, err)
			}
			if res, _ := v.Verify(ctx, sol, strconv.Itoa(want+1)); res.Correct {
				t.Errorf("%q accepted against %d", sol, want+1)
			}
		}
	}
	if steps == 0 {
		t.Error("no solution has intermediate steps")
	}
}

func TestSolutionExamples(t *testing.T) {
	for _, tc := range []struct {
		a     int
		sign  byte
		b     int
		steps string
	}{
		{23, '+', 45, "23+45 = 20+40 + 3+5 = 60+8 = 68"},
		{27, '+', 45, "27+45 = 20+40 + 7+5 = 60+12 = 72"},
		{23, '+', 5, "23+5 = 20 + 3+5 = 20+8 = 28"},
		{20, '+', 40, "20+40 = 60"},
		{45, '-', 23, "45-23 = 40-20 + 5-3 = 20+2 = 22"},
		{42, '-', 27, "42-27 = 40-20 - (7-2) = 20-5 = 15"},
		{40, '-', 7, "40-7 = 33"},
		{7, '*', 23, "7*23 = 7*20 + 7*3 = 140+21 = 161"},
		{7, '*', 8, "7*8 = 56"},
		{45, '-', 45, "45-45 = 40-40 + 5-5 = 0"},
	} {
		if got := strings.Join(steps(tc.a, tc.sign, tc.b), " = "); got != tc.steps {
			t.Errorf("steps(%d%c%d) = %q, want %q", tc.a, tc.sign, tc.b, got, tc.steps)
		}
	}
	got := solutions(23, '+', 45, "68")
	want := []string{" 23+45 = 20+40 + 3+5 = 60+8 = 68. #### 68", " 23+45 = 68. #### 68", " #### 68"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("solutions(23+45) = %q, want %q", got, want)
	}
}

func TestCharacters(t *testing.T) {
	ps := Generate(5, 2000, Options{})
	texts := Corpus(ps, 5)
	for _, p := range ps {
		texts = append(texts, p.Prompt, p.Answer, p.ID)
	}
	for _, s := range texts {
		for _, r := range s {
			if r != ' ' && !strings.ContainsRune(modelChars, r) {
				t.Fatalf("%q: character %q is not in the tiny model's vocabulary", s, r)
			}
		}
		if len(s) > 100 {
			t.Errorf("%q: %d bytes, want short texts for a tiny model", s, len(s))
		}
	}
}

func TestSplit(t *testing.T) {
	ps := Generate(1, 300, Options{})
	train, eval := Split(ps, 50, 7)
	if len(train) != 250 || len(eval) != 50 {
		t.Fatalf("split 300/50: %d train, %d eval", len(train), len(eval))
	}
	inEval := map[string]bool{}
	for _, p := range eval {
		inEval[p.Prompt] = true
	}
	for _, p := range train {
		if inEval[p.Prompt] {
			t.Fatalf("%q is in both train and eval", p.Prompt)
		}
	}
	if tr, e := Split(ps, 50, 7); !reflect.DeepEqual(e, eval) || !reflect.DeepEqual(tr, train) {
		t.Error("the same seed gives another split")
	}
	if _, e := Split(ps, 50, 8); reflect.DeepEqual(e, eval) {
		t.Error("another seed gives the same held-out set")
	}
	if tr, e := Split(ps[:10], 50, 1); len(tr) != 0 || len(e) != 10 {
		t.Errorf("held out beyond n: %d train, %d eval", len(tr), len(e))
	}
}

// TestSplitStratified reproduces the demo's finding: with small operands
// Generate runs out of distinct additions and multiplications early, so
// the first 200 problems (the old split's held-out set) were 102 bare
// "a+b"/"a*b" problems out of 200 though such problems are a few percent of
// the task. The held-out set must hold each kind in its share of the task.
func TestSplitStratified(t *testing.T) {
	ps := Generate(1, 4000, Options{MaxOperand: 9, MaxWordOperand: 9, Ops: []Op{Add, Mul, Word}})
	count := func(s []Problem) map[Op]int {
		n := map[Op]int{}
		for _, p := range s {
			n[p.Op]++
		}
		return n
	}
	all := count(ps)
	for _, seed := range []uint64{1, 2, 3} {
		_, eval := Split(ps, 200, seed)
		got := count(eval)
		for op, n := range all {
			want := 200 * float64(n) / float64(len(ps))
			if math.Abs(float64(got[op])-want) > 1 {
				t.Errorf("seed %d: %d %s problems held out, want %.1f (their share of %d problems)", seed, got[op], op, want, len(ps))
			}
		}
	}
}

func TestCorpus(t *testing.T) {
	ps := Generate(1, 1000, Options{})
	c := Corpus(ps, 1)
	if !reflect.DeepEqual(c, Corpus(ps, 1)) {
		t.Fatal("corpus is not deterministic")
	}
	if len(c) != len(ps) {
		t.Fatalf("%d texts for %d problems", len(c), len(ps))
	}
	short := 0
	for _, s := range c {
		if strings.HasSuffix(s, "A: #### "+s[strings.LastIndex(s, " ")+1:]) {
			short++
		}
	}
	if short < 200 || short > 600 {
		t.Errorf("%d of 1000 texts use the bare answer, want a mix of styles", short)
	}
	var buf bytes.Buffer
	if err := WriteCorpus(&buf, c); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCorpus(&buf)
	if err != nil || !reflect.DeepEqual(back, c) {
		t.Fatalf("corpus round trip: %v", err)
	}
	if err := WriteCorpus(&buf, []string{"a\nb"}); err == nil {
		t.Error("a text with a newline was written")
	}
}

func TestWritePrompts(t *testing.T) {
	ps := Generate(1, 20, Options{})
	path := filepath.Join(t.TempDir(), "train.jsonl")
	if err := WritePrompts(path, ps, ""); err != nil {
		t.Fatal(err)
	}
	recs, _, _, err := dataset.ReadFile[dataset.Prompt](path, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(ps) {
		t.Fatalf("read %d records, wrote %d", len(recs), len(ps))
	}
	for i, r := range recs {
		if r.Schema != dataset.SchemaPrompt || r.ID != ps[i].ID || r.Prompt != ps[i].Prompt || r.Answer != ps[i].Answer || r.Verifier != "math" {
			t.Errorf("record %d: %+v, want problem %+v", i, r, ps[i])
		}
	}
}

// With a system prompt the records are chats: the system message, then the
// question alone as the user's.
func TestWriteChatPrompts(t *testing.T) {
	ps := Generate(1, 20, Options{Ops: []Op{Add, Word}})
	path := filepath.Join(t.TempDir(), "train.jsonl")
	const system = "Solve it. End with: The answer is N."
	if err := WritePrompts(path, ps, system); err != nil {
		t.Fatal(err)
	}
	recs, _, _, err := dataset.ReadFile[dataset.Prompt](path, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		m := r.Messages
		if r.Prompt != "" || len(m) != 2 || m[0].Role != "system" || m[0].Content != system || m[1].Role != "user" || r.Answer != ps[i].Answer ||
			strings.HasPrefix(m[1].Content, "Q:") || strings.HasSuffix(m[1].Content, "A:") || !strings.Contains(ps[i].Prompt, m[1].Content) {
			t.Fatalf("record %d: %+v, from problem %+v", i, r, ps[i])
		}
	}
	if q := Question("Q: 3+4=? A:"); q != "3+4=?" {
		t.Errorf("Question gave %q", q)
	}
}

// operands reads the two numbers out of a prompt.
func operands(t *testing.T, p Problem) (int, int) {
	t.Helper()
	f := strings.FieldsFunc(p.Prompt, func(r rune) bool { return !unicode.IsDigit(r) })
	if len(f) != 2 {
		t.Fatalf("%q: want two numbers", p.Prompt)
	}
	a, _ := strconv.Atoi(f[0])
	b, _ := strconv.Atoi(f[1])
	return a, b
}

// eval evaluates an integer expression of + - * and parentheses.
func eval(t *testing.T, s string) int {
	t.Helper()
	s = strings.ReplaceAll(s, " ", "")
	pos := 0
	var expr, term, factor func() int
	expr = func() int {
		v := term()
		for pos < len(s) && (s[pos] == '+' || s[pos] == '-') {
			op := s[pos]
			pos++
			if w := term(); op == '+' {
				v += w
			} else {
				v -= w
			}
		}
		return v
	}
	term = func() int {
		v := factor()
		for pos < len(s) && s[pos] == '*' {
			pos++
			v *= factor()
		}
		return v
	}
	factor = func() int {
		if pos < len(s) && s[pos] == '(' {
			pos++
			v := expr()
			pos++ // ')'
			return v
		}
		start := pos
		for pos < len(s) && s[pos] >= '0' && s[pos] <= '9' {
			pos++
		}
		v, err := strconv.Atoi(s[start:pos])
		if err != nil {
			t.Fatalf("%q: bad number at %d", s, start)
		}
		return v
	}
	v := expr()
	if pos != len(s) {
		t.Fatalf("%q: trailing text at %d", s, pos)
	}
	return v
}

// Example output, for the docs and for a reader of the tests.
func ExampleGenerate() {
	for _, p := range Generate(1, 3, Options{}) {
		fmt.Printf("%s %q -> %s\n", p.ID, p.Prompt, p.Answer)
		for _, s := range p.Solutions {
			fmt.Printf("  %q\n", s)
		}
	}
	// Output:
	// arith-1-00000 "Q: Max has 2 bags with 6 coins in each. How many coins? A:" -> 12
	//   " 2*6 = 12. #### 12"
	//   " #### 12"
	// arith-1-00001 "Q: 5*95=? A:" -> 475
	//   " 5*95 = 5*90 + 5*5 = 450+25 = 475. #### 475"
	//   " 5*95 = 475. #### 475"
	//   " #### 475"
	// arith-1-00002 "Q: 60+57=? A:" -> 117
	//   " 60+57 = 60+50 + 7 = 110+7 = 117. #### 117"
	//   " 60+57 = 117. #### 117"
	//   " #### 117"
}
