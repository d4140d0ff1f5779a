package verifiers

import (
	"math/big"
	"regexp"
	"strings"
	"unicode"
)

// normalizeMath rewrites an extracted answer into the plain LaTeX-ish form
// the expression parser reads, in the spirit of the MATH and Math-Verify
// normalisers: it drops presentation (math delimiters, \left/\right, spacing
// commands, \boxed, degree signs, units, thousands separators, a final full
// stop) and spells variants one way (\dfrac → \frac, \frac12 → \frac{1}{2},
// unicode symbols → commands).
//
// Each regular expression runs only where its match can start (a cheap
// substring test first): most answers are short and plain, and the
// expressions were a third of the verifier's time.
func normalizeMath(s string) string {
	if !isASCII(s) { // every key of unicodeReplacer is non-ASCII
		s = unicodeReplacer.Replace(s)
	}
	if strings.Contains(s, `\begin`) {
		s = rewriteMatrices(s) // before the row separator \\ can be taken for spacing
	}
	if strings.Contains(s, `\,`) || strings.Contains(s, `{,}`) || strings.Contains(s, `\ `) {
		s = thinThousandsRE.ReplaceAllString(s, "$1$2")
	}
	if strings.Contains(s, `\left`) || strings.Contains(s, `\right`) || strings.Contains(s, `\big`) || strings.Contains(s, `\Big`) {
		s = sizingRE.ReplaceAllString(s, "")
	}
	if strings.ContainsAny(s, "\\$~\n\t\r") {
		s = latexReplacer.Replace(s)
	}
	s = rewriteRepeating(s)
	s = unwrapCommand(s, `\boxed`)
	s = unwrapCommand(s, `\fbox`)
	s = rewriteText(s)
	s = fixFracSqrt(s, 0)
	s = strings.Join(strings.Fields(s), " ")
	s = stripThousands(s)
	s = strings.TrimSpace(strings.TrimRight(s, " .\\"))
	if strings.IndexByte(s, '/') >= 0 && strings.IndexByte(s, ' ') >= 0 {
		s = mixedNumberRE.ReplaceAllString(s, "$1($2+$3/$4)")
	}
	s = stripUnitWords(s)
	return s
}

var (
	unicodeReplacer = strings.NewReplacer(
		"−", "-", "×", `\times `, "·", `\cdot `, "÷", `\div `, "√", `\sqrt`,
		"π", `\pi `, "∞", `\infty `, "±", `\pm `, "∓", `\mp `, "≤", `\le `,
		"≥", `\ge `, "≠", `\ne `, "⩽", `\le `, "⩾", `\ge `, "∪", `\cup `, "°", "", "\u00a0", " ", "，", ",", "²", "^2", "³", "^3", "∅", `\{\}`,
	)
	// "1\,000" and "1{,}000" group thousands in LaTeX.
	thinThousandsRE = regexp.MustCompile(`(\d)(?:\\,|\{,\}|\\ )(\d{3})`)
	// \left( \right) \bigl( ... carry no meaning; "\left." is an invisible delimiter.
	sizingRE = regexp.MustCompile(`\\(?:left|right)\.|\\(?:left|right|[bB]igg?[lr]?)\b`)

	latexReplacer = strings.NewReplacer(
		`\dfrac`, `\frac`, `\tfrac`, `\frac`, `\cfrac`, `\frac`,
		`\displaystyle`, "", `\!`, "", `\,`, " ", `\;`, " ", `\:`, " ", `\ `, " ",
		`\qquad`, " ", `\quad`, " ", "~", " ",
		`^{\circ}`, "", `^\circ`, "", `{}^\circ`, "", `\circ`, "", `\degree`, "",
		`\%`, "%", `\$`, "", "$", "", `\(`, "", `\)`, "", `\[`, "", `\]`, "",
		`\lvert`, "|", `\rvert`, "|", `\vert`, "|", `\lbrace`, `\{`, `\rbrace`, `\}`,
		`\emptyset`, `\{\}`, `\varnothing`, `\{\}`, `\infin`, `\infty`,
		`\leqslant`, `\le`, `\geqslant`, `\ge`, `\leqq`, `\le`, `\geqq`, `\ge`, `\leq`, `\le`, `\geq`, `\ge`,
		`\neq`, `\ne`, "\n", " ", "\t", " ", "\r", " ",
	)
	// "3 1/2" is a mixed number, three and a half.
	mixedNumberRE = regexp.MustCompile(`^(-?)(\d+) (\d+)/(\d+)$`)
)

var (
	// A repeating decimal: 0.\overline{3}, 0.1\bar{6}, 0.(3), 0.1(6).
	repeatingRE = regexp.MustCompile(`(\d*)\.(\d*)(?:\\(?:overline|bar) *(?:\{ *(\d+) *\}|(\d))|\((\d+)\))`)
	// The dot notation marks the first and last repeating digits:
	// 0.\dot{3} is 0.333..., 0.\dot{1}4285\dot{7} is 0.142857142857...
	repeatingDotRE = regexp.MustCompile(`(\d*)\.(\d*)\\dot *(?:\{(\d)\}|(\d))(?:(\d*)\\dot *(?:\{(\d)\}|(\d)))?`)
)

// rewriteRepeating replaces repeating decimals by the exact fraction they
// denote (0.\overline{3} → \frac{1}{3}, 0.1\overline{6} → \frac{1}{6}), so
// that they compare exactly like any other rational. The bracket form
// "0.(3)" is taken only as a whole number, not after a letter or inside a
// longer number, since "x.(3)" or "2.5(3)4" mean something else.
func rewriteRepeating(s string) string {
	if !strings.Contains(s, ".") || !strings.Contains(s, `\overline`) && !strings.Contains(s, `\bar`) &&
		!strings.Contains(s, `\dot`) && !hasDecimalBracket(s) {
		return s
	}
	s = replaceSubmatch(s, repeatingRE, func(s string, m []int) (string, bool) {
		rep := group(s, m, 3) + group(s, m, 4)
		if m[10] >= 0 { // "(digits)": stand-alone only
			if m[0] > 0 && (isAlnum(s[m[0]-1]) || strings.IndexByte("._^\\", s[m[0]-1]) >= 0) ||
				m[1] < len(s) && (isAlnum(s[m[1]]) || s[m[1]] == '.') {
				return "", false
			}
			rep = group(s, m, 5)
		}
		return repeatingFraction(group(s, m, 1), group(s, m, 2), rep)
	})
	if !strings.Contains(s, `\dot`) {
		return s
	}
	return replaceSubmatch(s, repeatingDotRE, func(s string, m []int) (string, bool) {
		first, last := group(s, m, 3)+group(s, m, 4), group(s, m, 6)+group(s, m, 7)
		return repeatingFraction(group(s, m, 1), group(s, m, 2), first+group(s, m, 5)+last)
	})
}

// hasDecimalBracket reports whether a "." and digits are followed by "(",
// where the bracket form of a repeating decimal must be.
func hasDecimalBracket(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '.' {
			continue
		}
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j < len(s) && s[j] == '(' {
			return true
		}
	}
	return false
}

// group is submatch k of the match m in s, "" when it did not take part.
func group(s string, m []int, k int) string {
	if m[2*k] < 0 {
		return ""
	}
	return s[m[2*k]:m[2*k+1]]
}

// replaceSubmatch replaces each match of re for which f says ok.
func replaceSubmatch(s string, re *regexp.Regexp, f func(s string, m []int) (string, bool)) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		if r, ok := f(s, m); ok {
			b.WriteString(s[last:m[0]])
			b.WriteString(r)
			last = m[1]
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// repeatingFraction is the value of whole.fixed(rep)(rep)... as LaTeX:
// (fixed·rep − fixed) / (10^len(fixed) · (10^len(rep) − 1)) added to whole.
func repeatingFraction(whole, fixed, rep string) (string, bool) {
	if rep == "" || len(whole)+len(fixed)+len(rep) > maxNumDigits {
		return "", false
	}
	toInt := func(d string) *big.Int {
		n, _ := new(big.Int).SetString("0"+d, 10)
		return n
	}
	ten := big.NewInt(10)
	num := new(big.Int).Sub(toInt(fixed+rep), toInt(fixed))
	den := new(big.Int).Exp(ten, big.NewInt(int64(len(rep))), nil)
	den.Sub(den, big.NewInt(1))
	den.Mul(den, new(big.Int).Exp(ten, big.NewInt(int64(len(fixed))), nil))
	r := new(big.Rat).SetFrac(num, den)
	r.Add(r, new(big.Rat).SetInt(toInt(whole)))
	if r.IsInt() {
		return r.Num().String(), true
	}
	return `\frac{` + r.Num().String() + "}{" + r.Denom().String() + "}", true
}

// unwrapCommand replaces every \cmd{X} by X.
func unwrapCommand(s, cmd string) string {
	for {
		i := strings.Index(s, cmd)
		if i < 0 {
			return s
		}
		j := i + len(cmd)
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j >= len(s) || s[j] != '{' {
			s = s[:i] + s[i+len(cmd):]
			continue
		}
		c := matchBrace(s, j)
		if c < 0 {
			s = s[:i] + s[j+1:]
			continue
		}
		s = s[:i] + s[j+1:c] + s[c+1:]
	}
}

// textCommands wrap words; their content is a unit after a number, a
// connective between answers, or the answer itself.
var textCommands = []string{`\text`, `\textbf`, `\textit`, `\textrm`, `\mathrm`, `\mbox`, `\mathbf`, `\operatorname`}

// unitPowerRE matches the exponent of a unit ("cm^2").
var unitPowerRE = regexp.MustCompile(`^\s*\^\s*(?:\{\s*[23]\s*\}|[23])`)

// rewriteText resolves \text{...} groups: "5\text{ cm}^2" → "5",
// "3 \text{ or } -3" → "3 or -3", "\text{(B)}" → "(B)".
func rewriteText(s string) string {
	var b strings.Builder
	for {
		i, cmd := firstCommand(s, textCommands)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i + len(cmd)
		for j < len(s) && s[j] == ' ' {
			j++
		}
		c := -1
		if j < len(s) && s[j] == '{' {
			c = matchBrace(s, j)
		}
		if c < 0 { // not a group: drop the command name only
			b.WriteString(s[:i])
			s = s[i+len(cmd):]
			continue
		}
		content := strings.TrimSpace(s[j+1 : c])
		before := b.String() + s[:i]
		b.WriteString(s[:i])
		rest := s[c+1:]
		switch lc := strings.ToLower(content); {
		case lc == "or" || lc == "and" || lc == ",":
			b.WriteString(" " + lc + " ")
		case endsNumeric(before) && isUnitText(content):
			if m := unitPowerRE.FindStringIndex(rest); m != nil {
				rest = rest[m[1]:]
			}
		default:
			b.WriteString(" " + content + " ")
		}
		s = rest
	}
}

// firstCommand returns the position of the first of cmds in s that is not
// the prefix of a longer command name.
func firstCommand(s string, cmds []string) (int, string) {
	best, name := -1, ""
	for _, c := range cmds {
		for off := 0; ; {
			k := strings.Index(s[off:], c)
			if k < 0 {
				break
			}
			k += off
			if e := k + len(c); e < len(s) && isLetter(s[e]) {
				off = e
				continue
			}
			if best < 0 || k < best {
				best, name = k, c
			}
			break
		}
	}
	return best, name
}

// endsNumeric reports whether s ends like a quantity (a digit or a closing
// bracket), so that words after it are units.
func endsNumeric(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" {
		return false
	}
	c := s[len(s)-1]
	return c >= '0' && c <= '9' || c == ')' || c == '}' || c == '%' || strings.HasSuffix(s, `\pi`)
}

// singleLetterUnits are units short enough to be mistaken for a variable;
// they count as units only inside \text{}.
var singleLetterUnits = map[string]bool{"m": true, "s": true, "g": true, "L": true, "h": true, "l": true}

// isUnitText reports whether a \text group after a number is a unit.
func isUnitText(c string) bool {
	letters := 0
	for _, r := range c {
		if unicode.IsLetter(r) {
			letters++
		}
	}
	return letters >= 2 || singleLetterUnits[c]
}

// mathWords are words that mean something to the parser and are never units.
var mathWords = map[string]bool{
	"pi": true, "sin": true, "cos": true, "tan": true, "sec": true, "csc": true, "cot": true,
	"ln": true, "log": true, "exp": true, "sqrt": true, "or": true, "and": true, "inf": true,
	"infty": true, "infinity": true,
}

// stripUnitWords drops trailing words after a quantity: "5 cm" → "5",
// "12 square feet" → "12", "3 apples." → "3". Single letters are kept
// ("2 x" is a product) as are words after a non-number ("New York").
func stripUnitWords(s string) string {
	words := strings.Split(s, " ")
	n := len(words)
	for n > 1 && isUnitWord(words[n-1]) && (endsNumeric(strings.Join(words[:n-1], " ")) || isUnitWord(words[n-2])) {
		n--
	}
	if n == len(words) || !endsNumeric(strings.Join(words[:n], " ")) {
		return s
	}
	return strings.Join(words[:n], " ")
}

// isUnitWord: at least two letters, optionally squared or cubed, not a math word.
func isUnitWord(w string) bool {
	w = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(w, "^2"), "^3"), ".")
	if len(w) < 2 || mathWords[strings.ToLower(w)] {
		return false
	}
	for i := 0; i < len(w); i++ {
		if !isLetter(w[i]) {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

var matrixRE = regexp.MustCompile(`\\begin\{[pbvB]?matrix\}(.*?)\\end\{[pbvB]?matrix\}`)

// rewriteMatrices turns a matrix into nested tuples: a column vector
// \begin{pmatrix}1\\2\end{pmatrix} becomes (1,2), a matrix ((1,2),(3,4)).
func rewriteMatrices(s string) string {
	return matrixRE.ReplaceAllStringFunc(s, func(m string) string {
		body := matrixRE.FindStringSubmatch(m)[1]
		rows := strings.Split(body, `\\`)
		out := make([]string, 0, len(rows))
		for _, r := range rows {
			if strings.TrimSpace(r) == "" {
				continue
			}
			cells := strings.Split(r, "&")
			if len(cells) == 1 {
				out = append(out, strings.TrimSpace(r))
			} else {
				out = append(out, "("+strings.Join(cells, ",")+")")
			}
		}
		return "(" + strings.Join(out, ",") + ")"
	})
}

// fixFracSqrt gives every \frac two braced arguments and every \sqrt one:
// "\frac12" → "\frac{1}{2}", "\frac\pi4" → "\frac{\pi}{4}", "\sqrt2" → "\sqrt{2}".
func fixFracSqrt(s string, depth int) string {
	if depth > maxDepth { // the parser refuses it anyway
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		cmd, nargs := "", 0
		switch {
		case strings.HasPrefix(s[i:], `\frac`) && !(i+5 < len(s) && isLetter(s[i+5])):
			cmd, nargs = `\frac`, 2
		case strings.HasPrefix(s[i:], `\sqrt`) && !(i+5 < len(s) && isLetter(s[i+5])):
			cmd, nargs = `\sqrt`, 1
		default:
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(cmd)
		i += len(cmd)
		if cmd == `\sqrt` && i < len(s) && s[i] == '[' { // \sqrt[3]{x}: keep the index as is
			if k := strings.IndexByte(s[i:], ']'); k > 0 {
				b.WriteString(s[i : i+k+1])
				i += k + 1
			}
		}
		for a := 0; a < nargs; a++ {
			for i < len(s) && s[i] == ' ' {
				i++
			}
			if i >= len(s) {
				break
			}
			switch {
			case s[i] == '{':
				// An unclosed brace ("\frac{") takes the rest of the text.
				inner, next := s[i+1:], len(s)
				if c := matchBrace(s, i); c >= 0 {
					inner, next = s[i+1:c], c+1
				}
				b.WriteString("{" + fixFracSqrt(inner, depth+1) + "}")
				i = next
			case s[i] == '\\': // a command argument: \frac\pi2
				j := i + 1
				for j < len(s) && isLetter(s[j]) {
					j++
				}
				if j == i+1 && j < len(s) {
					j++
				}
				b.WriteString("{" + s[i:j] + "}")
				i = j
			default:
				b.WriteString("{" + s[i:i+1] + "}")
				i++
			}
		}
	}
	return b.String()
}

var thousandsRE = regexp.MustCompile(`\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+`)

// stripThousands removes grouping commas and spaces ("1,234,567", "1 234")
// outside brackets, where a comma can only be a separator; inside brackets
// "(1,234)" stays a pair.
func stripThousands(s string) string {
	if !hasDigitGroup(s) {
		return s
	}
	ms := thousandsRE.FindAllStringIndex(s, -1)
	if ms == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		a, e := m[0], m[1]
		if (a > 0 && (isDigit(s[a-1]) || s[a-1] == '.' || s[a-1] == ',')) ||
			(e < len(s) && (isDigit(s[e]) || s[e] == ',' || s[e] == '/')) || bracketDepth(s[:a]) != 0 {
			continue
		}
		b.WriteString(s[last:a])
		b.WriteString(strings.NewReplacer(",", "", " ", "").Replace(s[a:e]))
		last = e
	}
	b.WriteString(s[last:])
	return b.String()
}

// hasDigitGroup reports whether s has a digit, a comma or blank, and three
// digits: where a match of thousandsRE must start.
func hasDigitGroup(s string) bool {
	for i := 0; i+4 < len(s); i++ {
		if isDigit(s[i]) && (s[i+1] == ',' || s[i+1] == ' ') && isDigit(s[i+2]) && isDigit(s[i+3]) && isDigit(s[i+4]) {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// bracketDepth counts open minus closed brackets of any kind, so that an
// interval "[1,2)" opens and closes.
func bracketDepth(s string) int {
	d := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '{':
			d++
		case ')', ']', '}':
			d--
		}
	}
	return d
}

// canonText is the text comparison of two normalised answers (tried first,
// and the last resort when they do not parse): lower case, and blanks kept
// only between two letters or digits ("x ^ 2" is "x^2", "1 2" is not "12").
func canonText(s string) string {
	var b strings.Builder
	fields := strings.Fields(strings.ToLower(s))
	for i, f := range fields {
		if i > 0 && isAlnum(fields[i-1][len(fields[i-1])-1]) && isAlnum(f[0]) {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}

func isAlnum(c byte) bool { return isLetter(c) || isDigit(c) }
