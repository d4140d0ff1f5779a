package verifiers

import (
	"slices"
	"strings"
)

// relation is an inequality or a chain of them ("1 < x \le 3"), oriented so
// that the order ops read left to right is "<" or "\le": "x > 3" is kept
// as "3 < x" and "x \ge 3" as "3 \le x". "\ne" stands alone.
type relation struct {
	ops   []string // "<", "\le" or "\ne"
	sides []*node  // len(ops)+1
}

// relOps are the comparison operators, longest spelling first, with the
// canonical name of each; ">" and "\ge" are flipped into "<" and "\le".
// "!=" is left out: in "5!=120" it is a factorial and an equals sign.
var relOps = []struct{ text, op string }{
	{"<=", `\le`}, {">=", `\ge`}, {"<", "<"}, {">", ">"},
	{`\le`, `\le`}, {`\ge`, `\ge`}, {`\ne`, `\ne`}, {`\lt`, "<"}, {`\gt`, ">"},
}

// splitRelation splits s at comparison operators outside brackets; ops is
// nil when there is none. eq reports an "=" outside brackets.
func splitRelation(s string) (parts, ops []string, eq bool) {
	parts = splitOutside(s, func(i int) int {
		if s[i] == '=' {
			eq = true
			return 0
		}
		if s[i] != '<' && s[i] != '>' && s[i] != '\\' {
			return 0
		}
		for _, r := range relOps {
			if !strings.HasPrefix(s[i:], r.text) {
				continue
			}
			e := i + len(r.text)
			if r.text[0] == '\\' && e < len(s) && isLetter(s[e]) { // \left, \neg
				continue
			}
			ops = append(ops, r.op)
			return len(r.text)
		}
		return 0
	})
	if ops == nil {
		return nil, nil, eq
	}
	return parts, ops, eq
}

// parseInequality reads an inequality or a chain of them; ok is false when
// s has no comparison other than "=" (equations are parseRelation's).
func parseInequality(s string) (value, bool) {
	parts, ops, eq := splitRelation(s)
	if ops == nil {
		return value{}, false
	}
	text := value{kind: vText, text: s}
	if eq || (len(ops) > 1 && slices.Contains(ops, `\ne`)) {
		return text, true // "0 < x = 1", "a \ne b \ne c": kept as text
	}
	up, down := 0, 0
	for _, op := range ops {
		switch op {
		case "<", `\le`:
			up++
		case ">", `\ge`:
			down++
		}
	}
	if up > 0 && down > 0 { // "1 < x > 0" states no single order
		return text, true
	}
	r := &relation{}
	for _, p := range parts {
		n, err := parseExpr(p)
		if err != nil {
			return text, true
		}
		r.sides = append(r.sides, n)
	}
	r.ops = ops
	if down > 0 { // "x > 3" is "3 < x"
		for i, j := 0, len(r.sides)-1; i < j; i, j = i+1, j-1 {
			r.sides[i], r.sides[j] = r.sides[j], r.sides[i]
		}
		r.ops = make([]string, len(ops))
		for i, op := range ops {
			flip := "<"
			if op == `\ge` {
				flip = `\le`
			}
			r.ops[len(ops)-1-i] = flip
		}
	}
	return value{kind: vRel, rel: r}, true
}

// relEqual compares two relations. The operators must be the same, so
// "x < 3" is never "x \le 3". A single inequality in variables compares as
// rhs - lhs up to a positive factor ("2x < 6" is "x < 3"; "\ne" up to any
// factor); without variables, and in a chain, the sides compare one by one.
func (c *comparer) relEqual(a, b *relation) bool {
	if len(a.ops) != len(b.ops) {
		return false
	}
	for i := range a.ops {
		if a.ops[i] != b.ops[i] {
			return false
		}
	}
	sidesEqual := func(bs []*node) bool {
		for i := range a.sides {
			if !c.exprEqual(a.sides[i], bs[i]) {
				return false
			}
		}
		return true
	}
	if len(a.ops) > 1 || !hasVars(a.sides...) && !hasVars(b.sides...) {
		if sidesEqual(b.sides) {
			return true
		}
		return a.ops[0] == `\ne` && len(a.ops) == 1 && sidesEqual([]*node{b.sides[1], b.sides[0]})
	}
	f := &node{kind: kSub, args: []*node{a.sides[1], a.sides[0]}}
	g := &node{kind: kSub, args: []*node{b.sides[1], b.sides[0]}}
	return c.proportional(f, g, a.ops[0] != `\ne`)
}

// hasVars reports whether any of ns has a variable.
func hasVars(ns ...*node) bool {
	for _, n := range ns {
		if hasKind(n, kVar) {
			return true
		}
	}
	return false
}

// relInterval turns a bound on one variable into the interval it denotes:
// "x > 3" is (3, \infty), "x \le 3" is (-\infty, 3], "1 \le x < 3" is
// [1, 3). ok is false for other relations, and for an open interval with
// two finite ends ("1 < x < 3"), which is written (1, 3) like a point.
func relInterval(r *relation) (value, bool) {
	inf := &node{kind: kInf}
	lo, hi := &node{kind: kNeg, args: []*node{inf}}, inf
	var loOp, hiOp string
	switch {
	case len(r.ops) == 1 && r.ops[0] != `\ne` && r.sides[1].kind == kVar && !hasVars(r.sides[0]):
		lo, loOp = r.sides[0], r.ops[0]
	case len(r.ops) == 1 && r.ops[0] != `\ne` && r.sides[0].kind == kVar && !hasVars(r.sides[1]):
		hi, hiOp = r.sides[1], r.ops[0]
	case len(r.ops) == 2 && r.sides[1].kind == kVar && !hasVars(r.sides[0], r.sides[2]):
		lo, hi, loOp, hiOp = r.sides[0], r.sides[2], r.ops[0], r.ops[1]
		if loOp == "<" && hiOp == "<" && !hasInf(lo) && !hasInf(hi) {
			return value{}, false
		}
	default:
		return value{}, false
	}
	iv := value{kind: vSeq, open: '(', close: ')', elems: []value{{kind: vExpr, expr: lo}, {kind: vExpr, expr: hi}}}
	if loOp == `\le` {
		iv.open = '['
	}
	if hiOp == `\le` {
		iv.close = ']'
	}
	return iv, true
}

// andOfBounds reads answers joined by "and": when they are inequalities,
// "and" intersects them, so a lower and an upper bound on one variable
// ("x > 1 and x < 3") become the chain 1 < x < 3; other inequalities
// joined by "and" stay text, never a list of answers, which would read as
// their union. Answers that are not inequalities are a list ("3 and -3").
func andOfBounds(v value, s string) value {
	if v.kind != vSet || !slices.ContainsFunc(v.elems, func(e value) bool { return e.kind == vRel }) {
		return v
	}
	text := value{kind: vText, text: s}
	if len(v.elems) != 2 {
		return text
	}
	var lo, hi *relation // lo: "a < x", hi: "x < b"
	for _, e := range v.elems {
		if e.kind != vRel || len(e.rel.ops) != 1 || e.rel.ops[0] == `\ne` {
			return text
		}
		r := e.rel
		switch {
		case r.sides[1].kind == kVar && !hasVars(r.sides[0]) && lo == nil:
			lo = r
		case r.sides[0].kind == kVar && !hasVars(r.sides[1]) && hi == nil:
			hi = r
		default:
			return text
		}
	}
	if lo == nil || hi == nil || !sameVar(lo.sides[1], hi.sides[0]) {
		return text
	}
	return value{kind: vRel, rel: &relation{
		ops:   []string{lo.ops[0], hi.ops[0]},
		sides: []*node{lo.sides[0], lo.sides[1], hi.sides[1]},
	}}
}
