// Package tasks generates a synthetic verifiable task: short arithmetic
// problems and tiny word problems, from a fixed seed, with gold answers the
// math verifier checks ("#### N", GSM8K style) and solutions of several
// lengths. It feeds the end-to-end demo: a small model is pre-trained on the
// corpus (which mixes long and short solutions), then RL on the train prompts
// can move both accuracy and the number of tokens the model spends.
//
// Every text uses only digits, ASCII letters, space and the signs
// + - * = ( ) . ? : # — all in the tiny model's vocabulary (modelgen.Chars).
package tasks

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Op is a kind of problem.
type Op string

// The kinds of problem Generate makes.
const (
	Add  Op = "add"  // "Q: 23+45=? A:"
	Sub  Op = "sub"  // "Q: 45-23=? A:", never negative
	Mul  Op = "mul"  // "Q: 7*23=? A:", a one-digit factor
	Word Op = "word" // "Q: Tom has 3 apples and gets 4 more. How many apples? A:"
)

// AllOps lists every Op, in the order Generate draws from by default.
var AllOps = []Op{Add, Sub, Mul, Word}

// Verifier is the verifier the answers are written for.
const Verifier = "math"

// Problem is one generated problem. Solutions are continuations of Prompt,
// longest (step by step) first and shortest ("#### N") last; each one ends
// where the model should stop, with the final answer after "####".
type Problem struct {
	ID        string
	Op        Op
	Prompt    string
	Answer    string
	Solutions []string
}

// Options are the difficulty knobs of Generate. Zero fields take the defaults.
type Options struct {
	// MaxOperand bounds the operands of Add and Sub and the larger factor
	// of Mul (default 99, so answers have at most three digits).
	MaxOperand int
	// MaxWordOperand bounds the numbers in word problems (default 20).
	MaxWordOperand int
	// Ops are the kinds to draw from, uniformly (default AllOps).
	Ops []Op
}

// Defaults of Options.
const (
	DefaultMaxOperand     = 99
	DefaultMaxWordOperand = 20
)

func (o Options) withDefaults() Options {
	if o.MaxOperand <= 0 {
		o.MaxOperand = DefaultMaxOperand
	}
	if o.MaxWordOperand <= 0 {
		o.MaxWordOperand = DefaultMaxWordOperand
	}
	if len(o.Ops) == 0 {
		o.Ops = AllOps
	}
	return o
}

// Validate reports an unknown Op or an operand bound too small to make a
// problem (below 2).
func (o Options) Validate() error {
	for _, op := range o.Ops {
		if !slices.Contains(AllOps, op) {
			return fmt.Errorf("tasks: unknown op %q (known: add, sub, mul, word)", op)
		}
	}
	if o.MaxOperand == 1 || o.MaxWordOperand == 1 {
		return fmt.Errorf("tasks: operand bounds must be at least 2 (max operand %d, max word operand %d)", o.MaxOperand, o.MaxWordOperand)
	}
	return nil
}

// ParseOps reads a comma-separated list of ops ("add,sub,mul,word").
func ParseOps(s string) ([]Op, error) {
	var ops []Op
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			ops = append(ops, Op(f))
		}
	}
	return ops, Options{Ops: ops}.Validate()
}

// maxDuplicateDraws bounds the draws in a row that only repeat earlier
// problems, after which Generate stops short of n.
const maxDuplicateDraws = 1000

// Generate makes n distinct problems (no two share a prompt) from seed. The
// same seed and options give the same problems, and a smaller n gives a
// prefix of a larger one. When the options allow fewer than n distinct
// problems it returns fewer. It panics on options that Validate rejects.
func Generate(seed uint64, n int, opts Options) []Problem {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	rng := rand.New(rand.NewPCG(seed, 0x7461736b73)) // "tasks"
	seen := make(map[string]bool, n)
	ps := make([]Problem, 0, n)
	for dup := 0; len(ps) < n && dup < maxDuplicateDraws; {
		p := draw(rng, opts)
		if seen[p.Prompt] {
			dup++
			continue
		}
		dup = 0
		seen[p.Prompt] = true
		p.ID = fmt.Sprintf("arith-%d-%05d", seed, len(ps))
		ps = append(ps, p)
	}
	return ps
}

// Split draws heldOut problems for eval and leaves the rest for train, by a
// seeded shuffle stratified by Op: each kind of problem is held out in
// proportion to its share of ps (largest remainders), so that the held-out
// set is a sample of the task and never, say, the kinds Generate happens to
// exhaust first. Both sets come back in a seeded random order (train[:k] is
// then a random sample of train too). Problems from Generate have distinct
// prompts, so the two sets are disjoint.
func Split(ps []Problem, heldOut int, seed uint64) (train, eval []Problem) {
	heldOut = max(0, min(heldOut, len(ps)))
	rng := rand.New(rand.NewPCG(seed, 0x73706c6974)) // "split"
	var kinds []Op
	strata := map[Op][]Problem{}
	for _, p := range ps {
		if _, ok := strata[p.Op]; !ok {
			kinds = append(kinds, p.Op)
		}
		strata[p.Op] = append(strata[p.Op], p)
	}
	// Quotas: the floor of each kind's share, then one more to the kinds
	// with the largest remainders (ties to the first kind seen).
	quota := map[Op]int{}
	type rem struct {
		op   Op
		frac float64
	}
	var rems []rem
	given := 0
	for _, op := range kinds {
		exact := float64(heldOut) * float64(len(strata[op])) / float64(len(ps))
		quota[op] = int(exact)
		given += quota[op]
		rems = append(rems, rem{op, exact - float64(quota[op])})
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.frac > b.frac:
			return -1
		case a.frac < b.frac:
			return 1
		}
		return 0
	})
	for i := 0; given < heldOut; i++ {
		quota[rems[i].op]++
		given++
	}
	for _, op := range kinds {
		s := slices.Clone(strata[op])
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		eval = append(eval, s[:quota[op]]...)
		train = append(train, s[quota[op]:]...)
	}
	rng.Shuffle(len(eval), func(i, j int) { eval[i], eval[j] = eval[j], eval[i] })
	rng.Shuffle(len(train), func(i, j int) { train[i], train[j] = train[j], train[i] })
	return train, eval
}

// Corpus is the supervised pre-training text: one prompt+solution per
// problem, in a seeded random order, with the solution style drawn uniformly
// from the problem's Solutions so that long and short answers are both
// learnt (RL can then move the length). Each text ends where the model
// should stop; the trainer appends the end-of-sequence token.
func Corpus(ps []Problem, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x636f72707573)) // "corpus"
	texts := make([]string, len(ps))
	for i, p := range ps {
		texts[i] = p.Prompt + p.Solutions[rng.IntN(len(p.Solutions))]
	}
	rng.Shuffle(len(texts), func(i, j int) { texts[i], texts[j] = texts[j], texts[i] })
	return texts
}

var (
	names  = []string{"Tom", "Ann", "Sam", "Mia", "Ben", "Eva", "Max", "Zoe"}
	things = []string{"apples", "pens", "cards", "eggs", "books", "coins", "cups", "balls"}
)

// draw makes one problem (without an ID).
func draw(rng *rand.Rand, o Options) Problem {
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	op := o.Ops[rng.IntN(len(o.Ops))]
	var a, b int
	var sign byte
	var prompt string
	switch op {
	case Add:
		a, b, sign = between(1, o.MaxOperand), between(1, o.MaxOperand), '+'
	case Sub:
		a = between(1, o.MaxOperand)
		b, sign = between(1, a), '-'
	case Mul:
		a, b, sign = between(2, min(9, o.MaxOperand)), between(2, o.MaxOperand), '*'
	case Word:
		name, thing := names[rng.IntN(len(names))], things[rng.IntN(len(things))]
		switch rng.IntN(3) {
		case 0:
			a, b, sign = between(1, o.MaxWordOperand), between(1, o.MaxWordOperand), '+'
			prompt = fmt.Sprintf("Q: %s has %d %s and gets %d more. How many %s? A:", name, a, thing, b, thing)
		case 1:
			a = between(2, o.MaxWordOperand)
			b, sign = between(1, a-1), '-'
			prompt = fmt.Sprintf("Q: %s has %d %s and gives %d away. How many are left? A:", name, a, thing, b)
		default:
			a, b, sign = between(2, min(9, o.MaxWordOperand)), between(2, min(9, o.MaxWordOperand)), '*'
			prompt = fmt.Sprintf("Q: %s has %d bags with %d %s in each. How many %s? A:", name, a, b, thing, thing)
		}
	}
	expr := fmt.Sprintf("%d%c%d", a, sign, b)
	if prompt == "" {
		prompt = "Q: " + expr + "=? A:"
	}
	ans := strconv.Itoa(apply(a, sign, b))
	return Problem{Op: op, Prompt: prompt, Answer: ans, Solutions: solutions(a, sign, b, ans)}
}

func apply(a int, sign byte, b int) int {
	switch sign {
	case '+':
		return a + b
	case '-':
		return a - b
	default:
		return a * b
	}
}

// solutions are the answer styles, longest first: the worked steps (when
// there are any), the equation, and the bare final answer. Each starts with
// a space (the prompt ends "A:") and ends with "#### answer".
func solutions(a int, sign byte, b int, ans string) []string {
	final := " #### " + ans
	eq := fmt.Sprintf(" %d%c%d = %s.", a, sign, b, ans)
	sols := []string{eq + final, final}
	if st := steps(a, sign, b); len(st) > 2 {
		sols = slices.Insert(sols, 0, " "+strings.Join(st, " = ")+"."+final)
	}
	return sols
}

// steps works a sum, difference or product out through place values: the
// stages of "27+45 = 20+40 + 7+5 = 60+12 = 72", each an expression equal to
// the result, with empty and repeated stages removed.
func steps(a int, sign byte, b int) []string {
	ta, oa, tb, ob := a-a%10, a%10, b-b%10, b%10
	stages := []string{fmt.Sprintf("%d%c%d", a, sign, b)}
	switch sign {
	case '+':
		stages = append(stages,
			join(" + ", sum(ta, tb), sum(oa, ob)),
			sum(ta+tb, oa+ob))
	case '-':
		high := diff(ta, tb)
		if oa >= ob {
			stages = append(stages, join(" + ", high, diff(oa, ob)), sum(ta-tb, oa-ob))
		} else { // borrow: 42-27 = 40-20 - (7-2) = 20-5
			low := strconv.Itoa(ob - oa)
			if oa != 0 {
				low = fmt.Sprintf("(%d-%d)", ob, oa)
			}
			stages = append(stages, high+" - "+low, diff(ta-tb, ob-oa))
		}
	case '*':
		stages = append(stages,
			join(" + ", prod(a, tb), prod(a, ob)),
			sum(a*tb, a*ob))
	}
	stages = append(stages, strconv.Itoa(apply(a, sign, b)))
	out := stages[:1]
	for _, s := range stages[1:] {
		if s != "" && strings.ReplaceAll(s, " ", "") != strings.ReplaceAll(out[len(out)-1], " ", "") {
			out = append(out, s)
		}
	}
	return out
}

// sum, diff and prod write "x+y", "x-y", "x*y" for x, y >= 0, leaving out
// zero terms (and the sign with them); they return "" when nothing is left.
// diff is only called with x >= y, so a leading minus is never needed.
func sum(x, y int) string  { return join("+", nonzero(x), nonzero(y)) }
func diff(x, y int) string { return join("-", nonzero(x), nonzero(y)) }
func prod(x, y int) string {
	if x == 0 || y == 0 {
		return ""
	}
	return fmt.Sprintf("%d*%d", x, y)
}

func nonzero(x int) string {
	if x == 0 {
		return ""
	}
	return strconv.Itoa(x)
}

// join joins the non-empty parts with sep.
func join(sep string, parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), sep)
}
