package pipeline

import (
	"math"
	"testing"
)

func TestMcNemar(t *testing.T) {
	before, after := map[string]bool{}, map[string]bool{}
	id := 0
	add := func(n int, b, a bool) {
		for range n {
			k := string(rune('a'+id%26)) + string(rune('a'+id/26))
			before[k], after[k] = b, a
			id++
		}
	}
	add(10, false, true) // fixed
	add(2, true, false)  // broken
	add(30, true, true)
	add(7, false, false)
	after["only-after"] = true // not in before: not paired, ignored
	fixed, broken, p := McNemar(before, after)
	// n = 12, k = 2: 2 * (1 + 12 + 66) / 4096.
	if fixed != 10 || broken != 2 || math.Abs(p-2*79.0/4096) > 1e-12 {
		t.Errorf("fixed %d, broken %d, p %g; want 10, 2, %g", fixed, broken, p, 2*79.0/4096)
	}
	if _, _, p := McNemar(map[string]bool{"x": true}, map[string]bool{"x": true}); p != 1 {
		t.Errorf("no discordant pairs: p %g, want 1", p)
	}
	if p := mcNemarP(500, 500); p != 1 {
		t.Errorf("balanced: p %g, want 1 (capped)", p)
	}
	if p := mcNemarP(900, 100); !(p > 0 && p < 1e-100) {
		t.Errorf("900 fixed, 100 broken: p %g, want tiny but positive", p)
	}
}

func TestMeanCI95(t *testing.T) {
	m, h := MeanCI95([]float64{1, 2, 3})
	if m != 2 || math.Abs(h-4.303/math.Sqrt(3)) > 1e-9 {
		t.Errorf("mean %g ± %g, want 2 ± %g", m, h, 4.303/math.Sqrt(3))
	}
	if _, h := MeanCI95([]float64{5, math.NaN()}); !math.IsNaN(h) {
		t.Errorf("one finite value: half-width %g, want NaN", h)
	}
}
