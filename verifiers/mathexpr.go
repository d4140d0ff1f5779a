package verifiers

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/cmplx"
	"strings"
)

// Limits that keep parsing and exact arithmetic bounded whatever the input.
const (
	maxDepth     = 64      // nesting of sub-expressions
	maxNodes     = 2000    // nodes in one expression
	maxNumDigits = 400     // digits in one number literal
	maxExp10     = 1000    // |exponent| of a literal in scientific notation
	maxRatBits   = 1 << 15 // bits of an exact intermediate (about 10,000 digits)
	maxFactorial = 1000
)

// A node of a parsed expression.
type node struct {
	kind kind
	num  *big.Rat // kNum
	name string   // kVar, kFunc
	args []*node
	// intLit marks an integer literal and frac a \frac of two integer
	// literals: together, "3\frac{1}{2}" is the mixed number 7/2.
	intLit, frac bool
}

type kind uint8

const (
	kNum kind = iota
	kVar
	kPi
	kE
	kInf
	kI // the imaginary unit
	kAdd
	kSub
	kMul
	kDiv
	kPow
	kNeg
	kFunc    // name(args[0]); log has the base in args[1]
	kRoot    // args[0] radicand, args[1] index
	kFact    // args[0]!
	kPercent // args[0] %
	kAbs
	kBinom
)

// --- lexer ---

type tokKind uint8

const (
	tEOF tokKind = iota
	tNum
	tIdent // a variable: x, x_1, \alpha, or a word
	tCmd   // a command or a function name, without backslash: frac, sin, pi
	tSym   // one symbol: + - * / ^ _ ( ) [ ] { } | ! % , = and \{ \}
)

type token struct {
	kind tokKind
	text string
}

// functions are applied to one argument; plain words ("sin x") and
// commands ("\sin x") both name them.
var functions = map[string]bool{
	"sin": true, "cos": true, "tan": true, "sec": true, "csc": true, "cot": true,
	"arcsin": true, "arccos": true, "arctan": true, "sinh": true, "cosh": true, "tanh": true,
	"ln": true, "log": true, "exp": true,
}

// plainNames are the words split off a run of letters as commands.
var plainNames = []string{"arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "sin", "cos", "tan",
	"sec", "csc", "cot", "sqrt", "log", "exp", "ln", "pi", "infinity", "infty", "inf"}

var greek = map[string]bool{
	"alpha": true, "beta": true, "gamma": true, "delta": true, "epsilon": true, "varepsilon": true,
	"zeta": true, "eta": true, "theta": true, "vartheta": true, "iota": true, "kappa": true,
	"lambda": true, "mu": true, "nu": true, "xi": true, "rho": true, "sigma": true, "tau": true,
	"upsilon": true, "phi": true, "varphi": true, "chi": true, "psi": true, "omega": true,
	"Gamma": true, "Delta": true, "Theta": true, "Lambda": true, "Xi": true, "Sigma": true,
	"Phi": true, "Psi": true, "Omega": true,
}

// binaryCommands are operators, so they do not start an implicit product.
var binaryCommands = map[string]bool{"cdot": true, "times": true, "div": true, "ast": true}

func lex(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ':
			i++
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			j := i
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			if j < len(s) && s[j] == '.' {
				j++
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			// Scientific notation: 1.5e3, 2E-4 (but "2e" alone is 2·e).
			if j+1 < len(s) && (s[j] == 'e' || s[j] == 'E') {
				k := j + 1
				if s[k] == '+' || s[k] == '-' {
					k++
				}
				if k < len(s) && isDigit(s[k]) {
					for k < len(s) && isDigit(s[k]) {
						k++
					}
					j = k
				}
			}
			if j-i > maxNumDigits {
				return nil, errors.New("number too long")
			}
			toks = append(toks, token{tNum, strings.TrimSuffix(s[i:j], ".")})
			i = j
		case isLetter(c):
			j := i
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			toks = append(toks, splitWord(s[i:j])...)
			i = j
		case c == '\\':
			j := i + 1
			for j < len(s) && isLetter(s[j]) {
				j++
			}
			switch name := s[i+1 : j]; {
			case name == "" && j < len(s) && (s[j] == '{' || s[j] == '}'):
				toks = append(toks, token{tSym, s[i : j+1]})
				j++
			case name == "":
				return nil, fmt.Errorf("unexpected %q", s[i:min(j+1, len(s))])
			case greek[name]:
				toks = append(toks, token{tIdent, `\` + name})
			default:
				toks = append(toks, token{tCmd, name})
			}
			i = j
		case strings.IndexByte("+-*/^_()[]{}|!%,=<>", c) >= 0:
			toks = append(toks, token{tSym, s[i : i+1]})
			i++
		default:
			return nil, fmt.Errorf("unexpected %q", s[i:])
		}
	}
	return toks, nil
}

// splitWord splits a run of letters: known function and constant names
// become commands ("sinx" → sin x), other words of three letters or more are
// one identifier (so that "dog" and "god" differ), and shorter runs are
// products of single-letter variables ("xy" → x·y).
func splitWord(w string) []token {
	var toks []token
	for len(w) > 0 {
		name := ""
		for _, n := range plainNames {
			if strings.HasPrefix(w, n) {
				name = n
				break
			}
		}
		switch {
		case name != "":
			toks = append(toks, token{tCmd, name})
			w = w[len(name):]
		case len(w) >= 3:
			return append(toks, token{tIdent, w})
		default:
			toks = append(toks, token{tIdent, w[:1]})
			w = w[1:]
		}
	}
	return toks
}

// --- parser ---

// parser is a recursive-descent parser for LaTeX-ish and plain expressions:
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/" | \cdot | \times | \div) unary | power }   (implicit product)
//	unary   = ("-" | "+") unary | power
//	power   = postfix [ "^" unary ]
//	postfix = primary { "!" | "%" }
//	primary = number | variable | constant | "(" expr ")" | "{" expr "}" | "[" expr "]"
//	        | "|" expr "|" | \frac A B | \sqrt[n] A | \binom A B | function [^ unary] [_ base] argument
type parser struct {
	toks   []token
	pos    int
	depth  int
	nodes  int
	inAbs  int
	failed error
}

var errTooComplex = errors.New("expression too complex")

func parseExpr(s string) (*node, error) {
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, errors.New("empty expression")
	}
	p := &parser{toks: toks}
	n := p.expr()
	if p.failed == nil && p.pos < len(p.toks) {
		p.fail("unexpected %q", p.toks[p.pos].text)
	}
	if p.failed != nil {
		return nil, p.failed
	}
	return n, nil
}

func (p *parser) peek() token {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return token{}
}

func (p *parser) next() token { t := p.peek(); p.pos++; return t }

func (p *parser) isSym(s string) bool { t := p.peek(); return t.kind == tSym && t.text == s }

// fail records the first error; the parser then unwinds, returning
// placeholder nodes, which keeps the grammar functions free of error plumbing.
func (p *parser) fail(format string, a ...any) *node {
	if p.failed == nil {
		p.failed = fmt.Errorf(format, a...)
	}
	p.pos = len(p.toks)
	return &node{kind: kNum, num: new(big.Rat)}
}

func (p *parser) mk(k kind, args ...*node) *node {
	p.nodes++
	if p.nodes > maxNodes && p.failed == nil {
		p.failed = errTooComplex
		p.pos = len(p.toks)
	}
	return &node{kind: k, args: args}
}

// enter bounds the recursion depth.
func (p *parser) enter() bool {
	p.depth++
	if p.depth > maxDepth && p.failed == nil {
		p.failed = errTooComplex
		p.pos = len(p.toks)
	}
	return p.failed == nil
}

func (p *parser) expect(sym string) {
	if !p.isSym(sym) {
		p.fail("expected %q", sym)
		return
	}
	p.next()
}

func (p *parser) expr() *node {
	defer func() { p.depth-- }()
	if !p.enter() {
		return p.fail("")
	}
	left := p.term()
	for p.failed == nil && (p.isSym("+") || p.isSym("-")) {
		k := kAdd
		if p.next().text == "-" {
			k = kSub
		}
		left = p.mk(k, left, p.term())
	}
	return left
}

func (p *parser) term() *node {
	left := p.unary()
	for p.failed == nil {
		t := p.peek()
		switch {
		case t.kind == tSym && t.text == "*", t.kind == tCmd && (t.text == "cdot" || t.text == "times" || t.text == "ast"):
			p.next()
			left = p.mk(kMul, left, p.unary())
		case t.kind == tSym && t.text == "/", t.kind == tCmd && t.text == "div":
			p.next()
			left = p.mk(kDiv, left, p.unary())
		case p.startsPrimary(t):
			right := p.power()
			left = p.implicitProduct(left, right)
		default:
			return left
		}
	}
	return left
}

// implicitProduct joins two juxtaposed factors: a product, except an
// integer before a fraction of integers, which is a mixed number (also
// of percent: "12\frac{1}{2}\%" is 12.5%).
func (p *parser) implicitProduct(left, right *node) *node {
	if right.kind == kPercent && right.args[0].frac && (left.intLit || left.kind == kNeg && left.args[0].intLit) {
		return p.mk(kPercent, p.implicitProduct(left, right.args[0]))
	}
	if right.frac {
		if left.intLit {
			return p.mk(kAdd, left, right)
		}
		if left.kind == kNeg && left.args[0].intLit {
			return p.mk(kNeg, p.mk(kAdd, left.args[0], right))
		}
	}
	return p.mk(kMul, left, right)
}

func (p *parser) startsPrimary(t token) bool {
	switch t.kind {
	case tNum, tIdent:
		return true
	case tCmd:
		return !binaryCommands[t.text] && t.text != "pm" && t.text != "mp"
	case tSym:
		return t.text == "(" || t.text == "{" || t.text == "[" || t.text == "|" && p.inAbs == 0
	}
	return false
}

func (p *parser) unary() *node {
	defer func() { p.depth-- }()
	if !p.enter() {
		return p.fail("")
	}
	switch {
	case p.isSym("-"):
		p.next()
		return p.mk(kNeg, p.unary())
	case p.isSym("+"):
		p.next()
		return p.unary()
	}
	return p.power()
}

func (p *parser) power() *node {
	base := p.postfix()
	if p.failed == nil && p.isSym("^") {
		p.next()
		return p.mk(kPow, base, p.unary())
	}
	return base
}

func (p *parser) postfix() *node {
	n := p.primary()
	for p.failed == nil {
		switch {
		case p.isSym("!"):
			p.next()
			n = p.mk(kFact, n)
		case p.isSym("%"):
			p.next()
			n = p.mk(kPercent, n)
		default:
			return n
		}
	}
	return n
}

func (p *parser) primary() *node {
	if p.failed != nil {
		return p.fail("")
	}
	t := p.next()
	switch t.kind {
	case tNum:
		return p.number(t.text)
	case tIdent:
		if t.text == "e" && !p.isSym("_") {
			return p.mk(kE)
		}
		if t.text == "i" && !p.isSym("_") {
			return p.mk(kI)
		}
		n := p.mk(kVar)
		n.name = t.text + p.subscript()
		return n
	case tCmd:
		return p.command(t.text)
	case tSym:
		switch t.text {
		case "(":
			n := p.expr()
			p.expect(")")
			return n
		case "[":
			n := p.expr()
			p.expect("]")
			return n
		case "{":
			n := p.expr()
			p.expect("}")
			return n
		case "|":
			p.inAbs++
			n := p.expr()
			p.inAbs--
			p.expect("|")
			return p.mk(kAbs, n)
		}
	}
	if t.kind == tEOF {
		return p.fail("unexpected end")
	}
	return p.fail("unexpected %q", t.text)
}

// subscript reads "_1", "_n" or "_{10}" after a name and returns it as text.
func (p *parser) subscript() string {
	if !p.isSym("_") {
		return ""
	}
	p.next()
	if !p.isSym("{") {
		return "_" + p.next().text
	}
	p.next()
	// x_{1} and x_1 are the same name.
	var b strings.Builder
	b.WriteString("_")
	for p.pos < len(p.toks) && !p.isSym("}") {
		b.WriteString(p.next().text)
	}
	p.expect("}")
	return b.String()
}

func (p *parser) number(text string) *node {
	mant, exp, hasExp := strings.Cut(strings.ToLower(text), "e")
	r, ok := new(big.Rat).SetString(mant)
	if !ok {
		return p.fail("bad number %q", text)
	}
	if hasExp {
		var e int
		if _, err := fmt.Sscan(exp, &e); err != nil || e > maxExp10 || e < -maxExp10 {
			return p.fail("exponent out of range in %q", text)
		}
		pow := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(e))), nil))
		if e < 0 {
			pow.Inv(pow)
		}
		r.Mul(r, pow)
	}
	n := p.mk(kNum)
	n.num = r
	n.intLit = !hasExp && !strings.Contains(text, ".")
	return n
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// group reads a braced argument ({...}) or, failing that, one primary.
func (p *parser) group() *node {
	if p.isSym("{") {
		p.next()
		n := p.expr()
		p.expect("}")
		return n
	}
	return p.primary()
}

func (p *parser) command(name string) *node {
	switch {
	case name == "pi":
		return p.mk(kPi)
	case name == "infty" || name == "inf" || name == "infinity":
		return p.mk(kInf)
	case name == "frac":
		num, den := p.group(), p.group()
		n := p.mk(kDiv, num, den)
		n.frac = num.intLit && den.intLit
		return n
	case name == "binom":
		return p.mk(kBinom, p.group(), p.group())
	case name == "sqrt":
		index := &node{kind: kNum, num: big.NewRat(2, 1)}
		if p.isSym("[") {
			p.next()
			index = p.expr()
			p.expect("]")
		}
		return p.mk(kRoot, p.group(), index)
	case functions[name]:
		var pow, base *node
		for p.failed == nil && (p.isSym("^") || p.isSym("_")) {
			if p.next().text == "^" {
				pow = p.unary()
			} else {
				base = p.group()
			}
		}
		// "\sin(x)" takes the group; "\sin 2x" takes the product 2x,
		// up to the next function: "\sin x \cos x" is sin(x)·cos(x).
		var arg *node
		if p.isSym("(") || p.isSym("{") {
			arg = p.primary()
		} else {
			arg = p.power()
			for t := p.peek(); p.failed == nil && p.startsPrimary(t) && !(t.kind == tCmd && functions[t.text]); t = p.peek() {
				arg = p.mk(kMul, arg, p.power())
			}
		}
		f := p.mk(kFunc, arg)
		f.name = name
		if base != nil {
			f.args = append(f.args, base)
		}
		if pow != nil { // \sin^2 x = (\sin x)^2
			return p.mk(kPow, f, pow)
		}
		return f
	}
	return p.fail("unknown command \\%s", name)
}

// --- exact evaluation ---

// exact evaluates n as a rational number when it is one without variables or
// irrational steps; ok is false otherwise (and when a value would exceed
// maxRatBits, so that 10^100000 cannot exhaust memory).
func exact(n *node) (r *big.Rat, ok bool) {
	switch n.kind {
	case kNum:
		return n.num, true
	case kNeg, kAbs, kPercent, kFact:
		a, ok := exact(n.args[0])
		if !ok {
			return nil, false
		}
		switch n.kind {
		case kNeg:
			return new(big.Rat).Neg(a), true
		case kAbs:
			return new(big.Rat).Abs(a), true
		case kPercent:
			return new(big.Rat).Quo(a, big.NewRat(100, 1)), true
		default:
			return factorial(a)
		}
	case kAdd, kSub, kMul, kDiv, kPow, kBinom, kRoot:
		a, ok := exact(n.args[0])
		if !ok {
			return nil, false
		}
		b, ok := exact(n.args[1])
		if !ok {
			return nil, false
		}
		var r *big.Rat
		switch n.kind {
		case kAdd:
			r = new(big.Rat).Add(a, b)
		case kSub:
			r = new(big.Rat).Sub(a, b)
		case kMul:
			r = new(big.Rat).Mul(a, b)
		case kDiv:
			if b.Sign() == 0 {
				return nil, false
			}
			r = new(big.Rat).Quo(a, b)
		case kPow:
			return ratPow(a, b)
		case kBinom:
			return binom(a, b)
		case kRoot:
			if !b.IsInt() || !b.Num().IsInt64() {
				return nil, false
			}
			return ratRoot(a, b.Num().Int64())
		}
		if r.Num().BitLen()+r.Denom().BitLen() > maxRatBits {
			return nil, false
		}
		return r, true
	}
	return nil, false
}

// ratPow is a^b for an integer b, or for b = 1/k when a is a perfect k-th power.
func ratPow(a, b *big.Rat) (*big.Rat, bool) {
	if !b.IsInt() {
		if b.Num().IsInt64() && b.Num().Int64() == 1 && b.Denom().IsInt64() {
			return ratRoot(a, b.Denom().Int64())
		}
		return nil, false
	}
	switch {
	case a.Sign() == 0 && b.Sign() < 0:
		return nil, false
	case a.Sign() == 0 || a.Cmp(big.NewRat(1, 1)) == 0 || b.Sign() == 0:
		if b.Sign() == 0 {
			return big.NewRat(1, 1), true
		}
		return a, true
	case a.Cmp(big.NewRat(-1, 1)) == 0:
		if b.Num().Bit(0) == 0 {
			return big.NewRat(1, 1), true
		}
		return a, true
	}
	if !b.Num().IsInt64() {
		return nil, false
	}
	e := b.Num().Int64()
	bits := int64(a.Num().BitLen() + a.Denom().BitLen())
	if e > maxRatBits || -e > maxRatBits || bits*max(e, -e) > maxRatBits {
		return nil, false
	}
	num := new(big.Int).Exp(a.Num(), big.NewInt(max(e, -e)), nil)
	den := new(big.Int).Exp(a.Denom(), big.NewInt(max(e, -e)), nil)
	if e < 0 {
		num, den = den, num
	}
	return new(big.Rat).SetFrac(num, den), true
}

// ratRoot is the k-th root of a when it is rational (a perfect power).
func ratRoot(a *big.Rat, k int64) (*big.Rat, bool) {
	if k < 1 || k > 64 || a.Sign() < 0 && k%2 == 0 {
		return nil, false
	}
	num, ok1 := intRoot(new(big.Int).Abs(a.Num()), k)
	den, ok2 := intRoot(a.Denom(), k)
	if !ok1 || !ok2 {
		return nil, false
	}
	r := new(big.Rat).SetFrac(num, den)
	if a.Sign() < 0 {
		r.Neg(r)
	}
	return r, true
}

// intRoot is the exact k-th root of x >= 0, if there is one.
func intRoot(x *big.Int, k int64) (*big.Int, bool) {
	if k == 2 {
		r := new(big.Int).Sqrt(x)
		return r, new(big.Int).Mul(r, r).Cmp(x) == 0
	}
	if x.BitLen() > 1024 {
		return nil, false
	}
	f, _ := new(big.Float).SetInt(x).Float64()
	r := big.NewInt(int64(math.Round(math.Pow(f, 1/float64(k)))))
	return r, new(big.Int).Exp(r, big.NewInt(k), nil).Cmp(x) == 0
}

func factorial(a *big.Rat) (*big.Rat, bool) {
	if !a.IsInt() || a.Sign() < 0 || a.Num().Cmp(big.NewInt(maxFactorial)) > 0 {
		return nil, false
	}
	return new(big.Rat).SetInt(new(big.Int).MulRange(1, a.Num().Int64())), true
}

func binom(n, k *big.Rat) (*big.Rat, bool) {
	if !n.IsInt() || !k.IsInt() || n.Sign() < 0 || k.Sign() < 0 || n.Num().Cmp(big.NewInt(maxFactorial)) > 0 {
		return nil, false
	}
	if k.Cmp(n) > 0 {
		return new(big.Rat), true
	}
	return new(big.Rat).SetInt(new(big.Int).Binomial(n.Num().Int64(), k.Num().Int64())), true
}

// --- numeric evaluation ---

// eval evaluates n in complex arithmetic (so that roots and logarithms of
// negative values at random points stay defined) with vars bound by env.
func eval(n *node, env map[string]complex128) complex128 {
	switch n.kind {
	case kNum:
		f, _ := n.num.Float64()
		return complex(f, 0)
	case kVar:
		return env[n.name]
	case kPi:
		return math.Pi
	case kE:
		return math.E
	case kInf:
		return complex(math.Inf(1), 0)
	case kI:
		if v, ok := env["i"]; ok { // a symbol here, see atPoints
			return v
		}
		return 1i
	case kNeg:
		return -eval(n.args[0], env)
	case kAbs:
		return complex(cmplx.Abs(eval(n.args[0], env)), 0)
	case kPercent:
		return eval(n.args[0], env) / 100
	case kFact:
		a := eval(n.args[0], env)
		return complex(math.Gamma(real(a)+1), 0)
	}
	a := eval(n.args[0], env)
	switch n.kind {
	case kAdd:
		return a + eval(n.args[1], env)
	case kSub:
		return a - eval(n.args[1], env)
	case kMul:
		return a * eval(n.args[1], env)
	case kDiv:
		return a / eval(n.args[1], env)
	case kPow:
		return cpow(a, eval(n.args[1], env))
	case kRoot:
		a = posZero(a)
		k := eval(n.args[1], env)
		if k == 2 {
			return cmplx.Sqrt(a)
		}
		// Odd roots of negative reals are real: \sqrt[3]{-8} = -2.
		if imag(a) == 0 && real(a) < 0 && imag(k) == 0 && math.Mod(real(k), 2) == 1 {
			return complex(-math.Pow(-real(a), 1/real(k)), 0)
		}
		return cmplx.Pow(a, 1/k)
	case kBinom:
		k := eval(n.args[1], env)
		lg := func(x float64) float64 { v, _ := math.Lgamma(x + 1); return v }
		return complex(math.Round(math.Exp(lg(real(a))-lg(real(k))-lg(real(a)-real(k)))), 0)
	case kFunc:
		return evalFunc(n, a, env)
	}
	return cmplx.NaN()
}

// cpow is a^b, exact in sign for integer powers of reals.
func cpow(a, b complex128) complex128 {
	a = posZero(a)
	if imag(a) == 0 && imag(b) == 0 && real(b) == math.Trunc(real(b)) {
		return complex(math.Pow(real(a), real(b)), 0)
	}
	return cmplx.Pow(a, b)
}

// posZero turns a negative zero imaginary part into +0, so that the
// principal branch is taken for a negative real: -4 computed as -(4+0i) is
// -4-0i, whose square root would otherwise be -2i.
func posZero(z complex128) complex128 {
	if imag(z) == 0 {
		return complex(real(z), 0)
	}
	return z
}

func evalFunc(n *node, a complex128, env map[string]complex128) complex128 {
	a = posZero(a)
	switch n.name {
	case "sin":
		return cmplx.Sin(a)
	case "cos":
		return cmplx.Cos(a)
	case "tan":
		return cmplx.Tan(a)
	case "sec":
		return 1 / cmplx.Cos(a)
	case "csc":
		return 1 / cmplx.Sin(a)
	case "cot":
		return 1 / cmplx.Tan(a)
	case "arcsin":
		return cmplx.Asin(a)
	case "arccos":
		return cmplx.Acos(a)
	case "arctan":
		return cmplx.Atan(a)
	case "sinh":
		return cmplx.Sinh(a)
	case "cosh":
		return cmplx.Cosh(a)
	case "tanh":
		return cmplx.Tanh(a)
	case "exp":
		return cmplx.Exp(a)
	case "ln":
		return cmplx.Log(a)
	case "log":
		if len(n.args) > 1 {
			return cmplx.Log(a) / cmplx.Log(eval(n.args[1], env))
		}
		return cmplx.Log10(a)
	}
	return cmplx.NaN()
}

// hasInf reports whether n mentions infinity, so that an overflow to Inf
// (10^{100000}) is not taken for it.
func hasInf(n *node) bool {
	if n.kind == kInf {
		return true
	}
	for _, a := range n.args {
		if hasInf(a) {
			return true
		}
	}
	return false
}

// vars adds the variable names in n to set.
func vars(n *node, set map[string]bool) {
	if n.kind == kVar {
		set[n.name] = true
	}
	for _, a := range n.args {
		vars(a, set)
	}
}
