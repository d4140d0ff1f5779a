package verifiers

import (
	"math/big"
)

// gauss is an exact Gaussian rational re + im·i, so that complex answers
// compare exactly when they are exact: "(1+i)^2" is "2i", "\sqrt{-4}" is
// "2i", and "0.333i" is not "\frac{i}{3}", as for real numbers.
type gauss struct{ re, im *big.Rat }

var ratZero, ratOne = new(big.Rat), big.NewRat(1, 1)

func (g gauss) isReal() bool { return g.im.Sign() == 0 }

func (g gauss) equal(h gauss) bool { return g.re.Cmp(h.re) == 0 && g.im.Cmp(h.im) == 0 }

// small reports whether both parts fit the bound on exact intermediates.
func (g gauss) small() bool {
	return g.re.Num().BitLen()+g.re.Denom().BitLen() <= maxRatBits &&
		g.im.Num().BitLen()+g.im.Denom().BitLen() <= maxRatBits
}

func gaussAdd(a, b gauss) gauss {
	return gauss{new(big.Rat).Add(a.re, b.re), new(big.Rat).Add(a.im, b.im)}
}

func gaussSub(a, b gauss) gauss {
	return gauss{new(big.Rat).Sub(a.re, b.re), new(big.Rat).Sub(a.im, b.im)}
}

func gaussMul(a, b gauss) gauss {
	re := new(big.Rat).Sub(new(big.Rat).Mul(a.re, b.re), new(big.Rat).Mul(a.im, b.im))
	im := new(big.Rat).Add(new(big.Rat).Mul(a.re, b.im), new(big.Rat).Mul(a.im, b.re))
	return gauss{re, im}
}

// gaussQuo is a/b; ok is false when b is zero.
func gaussQuo(a, b gauss) (gauss, bool) {
	den := new(big.Rat).Add(new(big.Rat).Mul(b.re, b.re), new(big.Rat).Mul(b.im, b.im))
	if den.Sign() == 0 {
		return gauss{}, false
	}
	conj := gauss{b.re, new(big.Rat).Neg(b.im)}
	p := gaussMul(a, conj)
	return gauss{p.re.Quo(p.re, den), p.im.Quo(p.im, den)}, true
}

// exactComplex evaluates n as a Gaussian rational when it is one without
// variables or irrational steps. It is tried only when exact (the real
// case) fails on a side, so real answers keep their fast path.
func exactComplex(n *node) (g gauss, ok bool) {
	switch n.kind {
	case kNum:
		return gauss{n.num, ratZero}, true
	case kI:
		return gauss{ratZero, ratOne}, true
	case kNeg, kPercent, kAbs, kFact:
		a, ok := exactComplex(n.args[0])
		if !ok {
			return gauss{}, false
		}
		switch n.kind {
		case kNeg:
			return gauss{new(big.Rat).Neg(a.re), new(big.Rat).Neg(a.im)}, true
		case kPercent:
			h := big.NewRat(1, 100)
			return gauss{new(big.Rat).Mul(a.re, h), new(big.Rat).Mul(a.im, h)}, true
		case kAbs: // |a+bi| = sqrt(a²+b²), exact only for a perfect square
			sq := new(big.Rat).Add(new(big.Rat).Mul(a.re, a.re), new(big.Rat).Mul(a.im, a.im))
			r, ok := ratRoot(sq, 2)
			return gauss{r, ratZero}, ok
		default:
			if !a.isReal() {
				return gauss{}, false
			}
			r, ok := factorial(a.re)
			return gauss{r, ratZero}, ok
		}
	case kAdd, kSub, kMul, kDiv, kPow, kRoot, kBinom:
		a, ok := exactComplex(n.args[0])
		if !ok {
			return gauss{}, false
		}
		b, ok := exactComplex(n.args[1])
		if !ok {
			return gauss{}, false
		}
		var r gauss
		switch n.kind {
		case kAdd:
			r = gaussAdd(a, b)
		case kSub:
			r = gaussSub(a, b)
		case kMul:
			r = gaussMul(a, b)
		case kDiv:
			if r, ok = gaussQuo(a, b); !ok {
				return gauss{}, false
			}
		case kPow:
			if r, ok = gaussPow(a, b); !ok {
				return gauss{}, false
			}
		case kRoot:
			if r, ok = gaussRoot(a, b); !ok {
				return gauss{}, false
			}
		case kBinom:
			if !a.isReal() || !b.isReal() {
				return gauss{}, false
			}
			v, ok := binom(a.re, b.re)
			return gauss{v, ratZero}, ok
		}
		return r, r.small()
	}
	return gauss{}, false
}

// gaussRoot is the principal root of a real radicand: a real root when
// ratRoot has one, and i·\sqrt{-a} for the square root of a negative a.
func gaussRoot(a, index gauss) (gauss, bool) {
	if !a.isReal() || !index.isReal() || !index.re.IsInt() || !index.re.Num().IsInt64() {
		return gauss{}, false
	}
	k := index.re.Num().Int64()
	if a.re.Sign() < 0 && k == 2 {
		r, ok := ratRoot(new(big.Rat).Neg(a.re), 2)
		return gauss{ratZero, r}, ok
	}
	r, ok := ratRoot(a.re, k)
	return gauss{r, ratZero}, ok
}

// gaussPow is a^b for an integer b (a unit such as i to any such power),
// or a real power that ratPow can do exactly (b = 1/2 of a negative real
// is a square root, i·\sqrt{-a}).
func gaussPow(a, b gauss) (gauss, bool) {
	if !b.isReal() {
		return gauss{}, false
	}
	if a.isReal() {
		if a.re.Sign() < 0 && b.re.Cmp(big.NewRat(1, 2)) == 0 {
			return gaussRoot(a, gauss{big.NewRat(2, 1), ratZero})
		}
		r, ok := ratPow(a.re, b.re)
		return gauss{r, ratZero}, ok
	}
	if !b.re.IsInt() {
		return gauss{}, false
	}
	e := new(big.Int).Set(b.re.Num())
	neg := e.Sign() < 0
	e.Abs(e)
	// A unit (±i here, since a is not real) cycles with period 4.
	if a.re.Sign() == 0 && new(big.Rat).Abs(a.im).Cmp(ratOne) == 0 {
		e.Mod(e, big.NewInt(4))
	}
	if !e.IsInt64() || e.Int64() > maxRatBits {
		return gauss{}, false
	}
	r, sq := gauss{ratOne, ratZero}, a
	for k := e.Int64(); k > 0; k >>= 1 {
		if k&1 == 1 {
			if r = gaussMul(r, sq); !r.small() {
				return gauss{}, false
			}
		}
		if k > 1 {
			if sq = gaussMul(sq, sq); !sq.small() {
				return gauss{}, false
			}
		}
	}
	if neg {
		return gaussQuo(gauss{ratOne, ratZero}, r)
	}
	return r, true
}

// hasKind reports whether n contains a node of kind k.
func hasKind(n *node, k kind) bool {
	if n.kind == k {
		return true
	}
	for _, a := range n.args {
		if hasKind(a, k) {
			return true
		}
	}
	return false
}
