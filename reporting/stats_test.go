package reporting

import (
	"math"
	"strings"
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

// TestExperimentTables: one seed shows the arm's own McNemar counts; with
// several seeds the table shows intervals and the paired table compares
// each arm with the first, seed by seed.
func TestExperimentTables(t *testing.T) {
	mk := func(name string, accs ...float64) ArmResult {
		a := ArmResult{Arm: name}
		for i, acc := range accs {
			a.Seeds = append(a.Seeds, SeedResult{Seed: uint64(i + 1), AccBefore: 0.5, AccAfter: acc, SampledTokens: 8 + acc,
				ZeroStd: 0.3, Fixed: 40, Broken: 10, McNemarP: mcNemarP(40, 10),
				ECEBefore: 0.2, ECEAfter: 0.1 + acc/10, BrierBefore: 0.25, BrierAfter: 0.3})
		}
		a.Summarise()
		return a
	}
	one := ExperimentTable([]ArmResult{mk("binary_grpo", 0.6)}, 1)
	if !strings.Contains(one, "fixed 40, broken 10, p = 2.4e-05") || strings.Contains(one, "±") ||
		!strings.Contains(one, "| 0.200 → 0.160 | 0.250 → 0.300 |") {
		t.Errorf("one seed:\n%s", one)
	}
	if strings.Contains(one, "Stated confidence") {
		t.Errorf("no arm states a confidence, yet:\n%s", one)
	}
	arms := []ArmResult{mk("binary_grpo", 0.6, 0.62, 0.58), mk("confclip_grpo", 0.65, 0.62, 0.6)}
	for i := range arms[1].Seeds {
		arms[1].Seeds[i].StatedAfter, arms[1].Seeds[i].StatedECEAfter, arms[1].Seeds[i].StatedBrierAfter = 0.5, 0.1, 0.2
	}
	arms[1].Summarise()
	many := ExperimentTable(arms, 3)
	if !strings.Contains(many, "| confclip_grpo | 0.50 | 0.100 | 0.200 |") || strings.Count(many, "| binary_grpo |") != 1 {
		t.Errorf("stated confidences:\n%s", many)
	}
	if !strings.Contains(many, "p < 0.01 in 3 of 3 seeds (fixed 120, broken 30 in all)") || !strings.Contains(many, "0.600 ± ") {
		t.Errorf("three seeds:\n%s", many)
	}
	paired := PairedTable(arms)
	if !strings.Contains(paired, "| confclip_grpo | 0.023 ± ") || !strings.Contains(paired, "| 2 / 1 / 0 |") {
		t.Errorf("paired:\n%s", paired)
	}
}
