package verifiers

import (
	"context"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"sort"
	"strings"
)

// value is an answer's structure: a single expression, an ordered tuple or
// interval, an order-free set of answers, an equation, or text that does
// not parse.
type value struct {
	kind        valueKind
	expr        *node   // vExpr; vEq holds lhs - rhs
	open, close byte    // vSeq delimiters: ( [ and ) ]
	elems       []value // vSeq, vSet
	text        string  // vText
	rel         *relation
	named       *node // vExpr read from "y = expr": y, so that it can still match an equation
}

type valueKind uint8

const (
	vExpr valueKind = iota
	vSeq
	vSet
	vEq
	vRel // an inequality or a chain of them
	vText
)

const (
	maxElems     = 64 // elements of one tuple or set
	maxPlusMinus = 3  // ± signs expanded (2^3 values)
	maxNesting   = 8  // structure nesting
)

// parseValue reads a normalised answer. The splits are tried from the
// loosest binding to the tightest:
//
//	± expansion      "1 \pm \sqrt{2}"  → {1+√2, 1-√2}
//	alternatives     "3 or -3", "3; -3", "3 and -3" → set
//	unions           "(-\infty,1) \cup (2,\infty)"  → set of intervals
//	set braces       "\{1, 2\}"                     → set
//	bare lists       "1, 2"                         → set (MATH's "all solutions")
//	inequalities     "x > 3" → 3 < x; "1 \le x < 3"
//	equations        "x = 3" → 3; "x \in [0,1]" → [0,1]; "y = 2x" vs "2x - y = 0"
//	tuples/intervals "(1, 2)", "[0, 1)"
//	expressions      everything else; text when it does not parse
func parseValue(s string, depth int) value {
	s = strings.TrimSpace(s)
	if depth > maxNesting {
		return value{kind: vText, text: s}
	}
	if strings.Contains(s, `\pm`) || strings.Contains(s, `\mp`) {
		if vs, ok := expandPlusMinus(s); ok {
			return setOf(vs, depth)
		}
	}
	for _, sep := range []string{" or ", ";", " and "} {
		if parts := splitTop(s, sep); len(parts) > 1 {
			v := setOf(parts, depth)
			if sep == " and " { // "x > 1 and x < 3" is 1 < x < 3, not two answers
				return andOfBounds(v, s)
			}
			return v
		}
	}
	if parts := splitTop(s, `\cup`); len(parts) > 1 {
		return setOf(parts, depth)
	}
	if strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && enclosed(s, 2) {
		inner := strings.TrimSpace(s[2 : len(s)-2])
		if inner == "" {
			return value{kind: vSet}
		}
		if cond, ok := setBuilder(inner); ok { // \{x \mid x > 3\} is x > 3
			return parseValue(cond, depth+1)
		}
		return setOf(splitTop(inner, ","), depth)
	}
	if !enclosed(s, 1) {
		if parts := splitTop(s, ","); len(parts) > 1 {
			return setOf(parts, depth)
		}
	}
	if v, ok := parseInequality(s); ok {
		return v
	}
	if v, ok := parseRelation(s, depth); ok {
		return v
	}
	if len(s) >= 2 && (s[0] == '(' || s[0] == '[') && (s[len(s)-1] == ')' || s[len(s)-1] == ']') && enclosed(s, 1) {
		if parts := splitTop(s[1:len(s)-1], ","); len(parts) > 1 && len(parts) <= maxElems {
			v := value{kind: vSeq, open: s[0], close: s[len(s)-1]}
			for _, p := range parts {
				v.elems = append(v.elems, parseValue(p, depth+1))
			}
			return v
		}
	}
	n, err := parseExpr(s)
	if err != nil {
		return value{kind: vText, text: s}
	}
	return value{kind: vExpr, expr: n}
}

// parseRelation handles "lhs = rhs" and "x \in S". A bare variable on the
// left ("x = 3", "f(x) = ..." is not one) names the answer and is dropped;
// otherwise the equation is kept as lhs - rhs.
func parseRelation(s string, depth int) (value, bool) {
	if parts := splitTop(s, `\in`); len(parts) == 2 && isVariable(parts[0]) {
		return parseValue(parts[1], depth+1), true
	}
	parts := splitTop(s, "=")
	if len(parts) < 2 {
		return value{}, false
	}
	if isVariable(parts[0]) || isVariableTuple(parts[0]) { // "x = y = 3": the last side is the value
		return withName(parseValue(parts[len(parts)-1], depth+1), parts[0], len(parts) == 2), true
	}
	if len(parts) != 2 {
		return value{kind: vText, text: s}, true
	}
	if isVariable(parts[1]) { // "2x + 3 = y"
		return withName(parseValue(parts[0], depth+1), parts[1], true), true
	}
	lhs, err1 := parseExpr(parts[0])
	rhs, err2 := parseExpr(parts[1])
	if err1 != nil || err2 != nil {
		return value{kind: vText, text: s}, true
	}
	return value{kind: vEq, expr: &node{kind: kSub, args: []*node{lhs, rhs}}}, true
}

// setBuilder returns the condition of a set written "x \mid cond",
// "x | cond" or "x : cond" (also "x \in \mathbb{R} \mid cond").
func setBuilder(inner string) (string, bool) {
	for _, sep := range []string{`\mid`, "|", ":"} {
		parts := splitTop(inner, sep)
		if len(parts) != 2 {
			continue
		}
		v := parts[0]
		if in := splitTop(v, `\in`); len(in) == 2 {
			v = in[0]
		}
		if isVariable(v) {
			return parts[1], true
		}
	}
	return "", false
}

// withName keeps the variable an expression was solved for, so that
// "y = 2x + 1" also matches the equation "2x - y + 1 = 0".
func withName(v value, name string, ok bool) value {
	if ok && v.kind == vExpr {
		if n, err := parseExpr(name); err == nil {
			v.named = n
		}
	}
	return v
}

// sameVar reports whether two variable nodes name the same variable.
func sameVar(a, b *node) bool { return a.kind == b.kind && a.name == b.name }

// isVariable: a letter, a Greek letter or a short name, optionally subscripted.
func isVariable(s string) bool {
	toks, err := lex(strings.TrimSpace(s))
	if err != nil || len(toks) == 0 || toks[0].kind != tIdent || len(toks[0].text) > 8 {
		return false
	}
	p := &parser{toks: toks, pos: 1}
	p.subscript()
	return p.failed == nil && p.pos == len(toks)
}

// isVariableTuple: "(x, y)", as in "(x, y) = (3, 4)".
func isVariableTuple(s string) bool {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return false
	}
	for _, p := range strings.Split(s[1:len(s)-1], ",") {
		if !isVariable(p) {
			return false
		}
	}
	return true
}

func setOf(parts []string, depth int) value {
	v := value{kind: vSet}
	for _, p := range parts {
		if strings.TrimSpace(p) == "" { // "1, 2, and 3"
			continue
		}
		e := parseValue(p, depth+1)
		if e.kind == vSet { // flatten: "\pm 3 or 0"
			v.elems = append(v.elems, e.elems...)
		} else {
			v.elems = append(v.elems, e)
		}
		if len(v.elems) > maxElems {
			return value{kind: vText, text: strings.Join(parts, ",")}
		}
	}
	return v
}

// expandPlusMinus replaces each \pm (and \mp) by + and - in turn.
func expandPlusMinus(s string) ([]string, bool) {
	out := []string{s}
	for range maxPlusMinus {
		var next []string
		for _, t := range out {
			i, cmd := firstCommand(t, []string{`\pm`, `\mp`})
			if i < 0 {
				return out, true
			}
			next = append(next, t[:i]+"+"+t[i+len(cmd):], t[:i]+"-"+t[i+len(cmd):])
		}
		out = next
	}
	if i, _ := firstCommand(out[0], []string{`\pm`, `\mp`}); i >= 0 {
		return nil, false
	}
	return out, true
}

// splitOutside is the one bracket-depth splitter: it cuts s at the
// separators found outside brackets, where sepLen reports the length of a
// separator starting at s[i] (0 for none; it is asked only at depth 0). It
// returns nil when no separator was found.
func splitOutside(s string, sepLen func(i int) int) []string {
	var parts []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
			continue
		case ')', ']', '}':
			depth--
			continue
		}
		if depth != 0 {
			continue
		}
		if n := sepLen(i); n > 0 {
			parts = append(parts, s[last:i])
			last = i + n
			i = last - 1
		}
	}
	if parts == nil {
		return nil
	}
	return append(parts, s[last:])
}

// splitTop splits s at occurrences of sep outside brackets. A command
// separator (\cup) must not be the prefix of a longer command.
func splitTop(s, sep string) []string {
	parts := splitOutside(s, func(i int) int {
		if !strings.HasPrefix(s[i:], sep) {
			return 0
		}
		if sep[0] == '\\' && i+len(sep) < len(s) && isLetter(s[i+len(sep)]) {
			return 0
		}
		if sep == "=" && i > 0 && strings.IndexByte("<>!", s[i-1]) >= 0 {
			return 0
		}
		return len(sep)
	})
	if parts == nil {
		return []string{s}
	}
	return parts
}

// enclosed reports whether the bracket opened by the first n bytes of s
// closes only at its end, as in "(1, 2)" but not "(1)(2)".
func enclosed(s string, n int) bool {
	if len(s) < n || strings.IndexByte("([{", s[n-1]) < 0 {
		return false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 && i < len(s)-1 {
				return false
			}
		}
	}
	return depth == 0 && len(s) > n
}

// comparer compares values; it carries the tolerance and the context so
// that a long comparison stops at the deadline.
type comparer struct {
	ctx    context.Context
	relTol float64
	absTol float64 // the floor for values that should be zero, like sin(π)
}

// equal reports whether two answers are the same. Sets of one element are
// their element, so "3" matches "x = 3" and "\{3\}".
func (c *comparer) equal(a, b value) bool {
	if c.ctx.Err() != nil {
		return false
	}
	if a.kind == vSet && len(a.elems) == 1 {
		a = a.elems[0]
	}
	if b.kind == vSet && len(b.elems) == 1 {
		b = b.elems[0]
	}
	if a.kind == vRel && b.kind == vSeq { // "x > 3" is (3, \infty)
		a, b = b, a
	}
	if a.kind == vSeq && b.kind == vRel {
		iv, ok := relInterval(b.rel)
		return ok && c.equal(a, iv)
	}
	if a.kind == vExpr && b.kind == vEq {
		a, b = b, a
	}
	if a.kind == vEq && b.kind == vExpr && b.named != nil {
		return c.proportional(a.expr, &node{kind: kSub, args: []*node{b.named, b.expr}}, false)
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case vText:
		return canonText(a.text) == canonText(b.text)
	case vExpr:
		if c.exprEqual(a.expr, b.expr) {
			return true
		}
		// Solved for different variables: "y = 2x+1" is "x = \frac{y-1}{2}".
		return a.named != nil && b.named != nil && !sameVar(a.named, b.named) &&
			c.proportional(&node{kind: kSub, args: []*node{a.named, a.expr}}, &node{kind: kSub, args: []*node{b.named, b.expr}}, false)
	case vEq:
		return c.proportional(a.expr, b.expr, false)
	case vRel:
		return c.relEqual(a.rel, b.rel)
	case vSeq:
		if a.open != b.open || a.close != b.close || len(a.elems) != len(b.elems) {
			return false
		}
		for i := range a.elems {
			if !c.equal(a.elems[i], b.elems[i]) {
				return false
			}
		}
		return true
	case vSet:
		return c.sameMultiset(a.elems, b.elems)
	}
	return false
}

// sameMultiset matches every element of a with a distinct element of b.
func (c *comparer) sameMultiset(a, b []value) bool {
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
outer:
	for _, x := range a {
		for j, y := range b {
			if !used[j] && c.equal(x, y) {
				used[j] = true
				continue outer
			}
		}
		return false
	}
	return true
}

// exprEqual compares two expressions: exactly when both are rational
// numbers, else numerically (relative tolerance) at fixed random points for
// their variables. A trailing percent sign may be read either way: "50\%"
// matches both 50 and 0.5. Two percentages compare as percentages, so that
// "0.5\%" (read as 0.5) is not "50\%" (read as 0.5).
func (c *comparer) exprEqual(a, b *node) bool {
	if a.kind == kPercent && b.kind == kPercent {
		return c.exprEqual1(a.args[0], b.args[0])
	}
	for _, x := range percentReadings(a) {
		for _, y := range percentReadings(b) {
			if c.exprEqual1(x, y) {
				return true
			}
		}
	}
	return false
}

func percentReadings(n *node) []*node {
	if n.kind == kPercent {
		return []*node{n.args[0], n}
	}
	return []*node{n}
}

func (c *comparer) exprEqual1(a, b *node) bool {
	ra, okA := exact(a)
	rb, okB := exact(b)
	if okA && okB {
		return ra.Cmp(rb) == 0
	}
	if ga, ok := exactComplex(a); ok {
		if gb, ok := exactComplex(b); ok {
			return ga.equal(gb)
		}
	}
	return c.atPoints(a, b, func(x, y complex128) bool { return c.close(x, y) })
}

// proportional reports whether two equations f = 0 and g = 0 are the same,
// that is f = k·g for a constant k ≠ 0 ("2x+2y=2" is "x+y=1"). For
// inequalities f > 0 and g > 0, positive requires k > 0.
func (c *comparer) proportional(f, g *node, positive bool) bool {
	var k complex128
	return c.atPoints(f, g, func(x, y complex128) bool {
		if c.close(y, 0) {
			return c.close(x, 0)
		}
		if k == 0 {
			k = x / y
			if positive && !(real(k) > 0 && math.Abs(imag(k)) <= c.relTol*cmplx.Abs(k)) {
				return false
			}
			return !c.close(k, 0)
		}
		return c.close(x, k*y)
	})
}

// numPoints random points are tried, of which minPoints must be defined
// on both sides and all defined ones must agree.
const (
	numPoints = 8
	minPoints = 3
)

// atPoints evaluates a and b at the same points, with a fixed seed so that
// verdicts are reproducible, and applies same to each pair of values.
// Points where either side is undefined are skipped.
func (c *comparer) atPoints(a, b *node, same func(x, y complex128) bool) bool {
	set := map[string]bool{}
	vars(a, set)
	vars(b, set)
	names := make([]string, 0, len(set))
	for v := range set {
		names = append(names, v)
	}
	// i is the imaginary unit in a numeric answer ("3+4i") but a symbol
	// among other free symbols ("x_i + i x"): both sides read it one way.
	if len(names) > 0 && (hasKind(a, kI) || hasKind(b, kI)) {
		names = append(names, "i")
	}
	sort.Strings(names)
	if len(names) == 0 {
		x, y := eval(a, nil), eval(b, nil)
		overflow := isInf(x) && !hasInf(a) || isInf(y) && !hasInf(b)
		return defined(x) && defined(y) && !overflow && same(x, y)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	env := make(map[string]complex128, len(names))
	valid := 0
	for range numPoints {
		if c.ctx.Err() != nil {
			return false
		}
		for _, v := range names {
			// Magnitudes in [0.3, 2.3] with either sign: away from 0 and
			// from small integers where different expressions can coincide.
			x := 0.3 + 2*rng.Float64()
			if rng.IntN(3) == 0 {
				x = -x
			}
			env[v] = complex(x, 0)
		}
		x, y := eval(a, env), eval(b, env)
		if !defined(x) || !defined(y) || isInf(x) || isInf(y) {
			continue
		}
		if !same(x, y) {
			return false
		}
		valid++
	}
	return valid >= minPoints
}

func defined(z complex128) bool {
	return !cmplx.IsNaN(z) && !math.IsNaN(real(z)) && !math.IsNaN(imag(z))
}

func isInf(z complex128) bool { return math.IsInf(real(z), 0) || math.IsInf(imag(z), 0) }

// close compares two numbers within the relative tolerance, or within the
// absolute one (a floor for values that should be zero, like sin(π)).
// Infinities are equal when they have the same sign.
func (c *comparer) close(x, y complex128) bool {
	if isInf(x) || isInf(y) {
		return real(x) == real(y) && math.IsInf(real(x), 0)
	}
	d := cmplx.Abs(x - y)
	return d <= c.relTol*max(cmplx.Abs(x), cmplx.Abs(y)) || d <= c.absTol
}
