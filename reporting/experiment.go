package reporting

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/metrics"
)

// ArmResult summarises one arm over its seeds.
type ArmResult struct {
	Arm   string       `json:"arm"`
	Seeds []SeedResult `json:"seeds"`
	// Means over seeds; the *CI fields are the half-widths of 95%
	// intervals over seeds (NaN for one seed), and AccAfterStd, TokensStd
	// standard deviations (n-1 divisor).
	AccBefore, AccAfter, AccAfterStd, AccAfterCI float64
	Gain, GainCI                                 float64 // held-out accuracy after - before
	TokensBefore, TokensAfter, TokensStd         float64
	Sampled, SampledCI                           float64 // mean sampled completion length over the steps
	ZeroStd, ZeroStdCI, ZeroStdBinary            float64
	SecondsPerStep                               float64
	// Calibration of the [confidence] estimator's confidence against
	// correctness on the held-out greedy completions (pipeline's
	// EvalResult): means over seeds, and 95% half-widths after.
	ECEBefore, ECEAfter, ECEAfterCI       float64
	BrierBefore, BrierAfter, BrierAfterCI float64
	// The held-out greedy completions after training that state a
	// confidence (<confidence>q</confidence>, RLCR's tag): their share, and
	// the calibration of the stated numbers; means over seeds.
	StatedAfter, StatedECEAfter, StatedBrierAfter float64
	// SignificantSeeds counts the seeds whose held-out gain has a paired
	// McNemar p < 0.01.
	SignificantSeeds int
	Rows             []metrics.Step `json:"-"` // seed-averaged per step, for plots
}

// SeedResult is one run of an arm.
type SeedResult struct {
	Start        string  `json:"start,omitempty"` // the start's name, with experiment.starts
	Seed         uint64  `json:"seed"`
	Dir          string  `json:"dir"`
	AccBefore    float64 `json:"held_out_accuracy_before"`
	AccAfter     float64 `json:"held_out_accuracy_after"`
	TokensBefore float64 `json:"held_out_tokens_before"`
	TokensAfter  float64 `json:"held_out_tokens_after"`
	ECEBefore    float64 `json:"held_out_ece_before"`
	ECEAfter     float64 `json:"held_out_ece_after"`
	BrierBefore  float64 `json:"held_out_brier_before"`
	BrierAfter   float64 `json:"held_out_brier_after"`
	// StatedAfter is the share of held-out greedy completions after
	// training that state a confidence; StatedECEAfter and StatedBrierAfter
	// its calibration (NaN when none does).
	StatedAfter      float64 `json:"held_out_stated_after"`
	StatedECEAfter   float64 `json:"held_out_stated_ece_after"`
	StatedBrierAfter float64 `json:"held_out_stated_brier_after"`
	ZeroStd          float64 `json:"zero_std_frac"`        // mean over steps
	ZeroStdBinary    float64 `json:"zero_std_frac_binary"` // mean over steps
	SampledTokens    float64 `json:"sampled_tokens"`       // mean over steps of the rollouts' mean length
	SecondsPerStep   float64 `json:"seconds_per_step"`
	SkippedSteps     int     `json:"skipped_steps"` // steps whose advantages were all zero
	// Fixed and Broken count the held-out prompts wrong before training
	// and right after, and the reverse; McNemarP is the paired test's
	// p-value (McNemar).
	Fixed    int     `json:"fixed"`
	Broken   int     `json:"broken"`
	McNemarP float64 `json:"mcnemar_p"`
}

// Summarise fills the arm's means and intervals over its seeds.
func (a *ArmResult) Summarise() {
	col := func(f func(SeedResult) float64) []float64 {
		var v []float64
		for _, s := range a.Seeds {
			v = append(v, f(s))
		}
		return v
	}
	a.AccBefore, _ = MeanStd(col(func(s SeedResult) float64 { return s.AccBefore }))
	a.AccAfter, a.AccAfterStd = MeanStd(col(func(s SeedResult) float64 { return s.AccAfter }))
	_, a.AccAfterCI = MeanCI95(col(func(s SeedResult) float64 { return s.AccAfter }))
	a.Gain, a.GainCI = MeanCI95(col(func(s SeedResult) float64 { return s.AccAfter - s.AccBefore }))
	a.Sampled, a.SampledCI = MeanCI95(col(func(s SeedResult) float64 { return s.SampledTokens }))
	_, a.ZeroStdCI = MeanCI95(col(func(s SeedResult) float64 { return s.ZeroStd }))
	a.SignificantSeeds = 0
	for _, s := range a.Seeds {
		if s.McNemarP < 0.01 {
			a.SignificantSeeds++
		}
	}
	a.TokensBefore, _ = MeanStd(col(func(s SeedResult) float64 { return s.TokensBefore }))
	a.TokensAfter, a.TokensStd = MeanStd(col(func(s SeedResult) float64 { return s.TokensAfter }))
	a.ZeroStd, _ = MeanStd(col(func(s SeedResult) float64 { return s.ZeroStd }))
	a.ZeroStdBinary, _ = MeanStd(col(func(s SeedResult) float64 { return s.ZeroStdBinary }))
	a.SecondsPerStep, _ = MeanStd(col(func(s SeedResult) float64 { return s.SecondsPerStep }))
	a.ECEBefore, _ = MeanStd(col(func(s SeedResult) float64 { return s.ECEBefore }))
	a.ECEAfter, a.ECEAfterCI = MeanCI95(col(func(s SeedResult) float64 { return s.ECEAfter }))
	a.BrierBefore, _ = MeanStd(col(func(s SeedResult) float64 { return s.BrierBefore }))
	a.BrierAfter, a.BrierAfterCI = MeanCI95(col(func(s SeedResult) float64 { return s.BrierAfter }))
	a.StatedAfter, _ = MeanStd(col(func(s SeedResult) float64 { return s.StatedAfter }))
	a.StatedECEAfter, _ = MeanStd(col(func(s SeedResult) float64 { return s.StatedECEAfter }))
	a.StatedBrierAfter, _ = MeanStd(col(func(s SeedResult) float64 { return s.StatedBrierAfter }))
}

// MeanStd is the mean and the n-1 standard deviation of the finite values
// (NaN when there are none: a seed whose run had no evaluation).
func MeanStd(v []float64) (mean, std float64) {
	var xs []float64
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return confclip.MeanStd(xs)
}

// AverageRows averages the runs' metrics step by step (for the comparison
// plots).
func AverageRows(runs [][]metrics.Step) []metrics.Step {
	bySteps := map[int][]metrics.Step{}
	for _, rows := range runs {
		for _, r := range rows {
			bySteps[r.Step] = append(bySteps[r.Step], r)
		}
	}
	var steps []int
	for s := range bySteps {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	var out []metrics.Step
	for _, s := range steps {
		rs := bySteps[s]
		m := metrics.Missing()
		m.Step = s
		avg := func(f func(metrics.Step) float64) float64 {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			x, _ := MeanStd(v)
			return x
		}
		m.Accuracy = avg(func(r metrics.Step) float64 { return r.Accuracy })
		m.MeanReward = avg(func(r metrics.Step) float64 { return r.MeanReward })
		m.ZeroStdFrac = avg(func(r metrics.Step) float64 { return r.ZeroStdFrac })
		m.ZeroStdFracBinary = avg(func(r metrics.Step) float64 { return r.ZeroStdFracBinary })
		m.MeanTokens = avg(func(r metrics.Step) float64 { return r.MeanTokens })
		ev := avg(func(r metrics.Step) float64 {
			if r.EvalAccuracy == nil {
				return math.NaN()
			}
			return *r.EvalAccuracy
		})
		if !math.IsNaN(ev) {
			m.EvalAccuracy = &ev
		}
		out = append(out, m)
	}
	return out
}

// ExperimentTable formats the arms as a Markdown table: held-out greedy
// accuracy before and after with the gain's paired McNemar test (per seed
// when there is one; otherwise how many seeds reached p < 0.01 and the
// summed counts), the mean sampled completion length and zero-std
// fraction over the steps, and the held-out calibration (ECE and Brier of
// the [confidence] estimator against correctness) before and after; ± is a
// 95% interval over seeds.
func ExperimentTable(arms []ArmResult, seeds int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| arm | held-out accuracy before | after | gain | paired test of the gain (McNemar) | sampled tokens | zero-std fraction (binary) | held-out tokens before → after | held-out ECE before → after | Brier before → after | s/step |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range arms {
		var test string
		if len(a.Seeds) == 1 {
			s := a.Seeds[0]
			test = fmt.Sprintf("fixed %d, broken %d, p = %s", s.Fixed, s.Broken, pValue(s.McNemarP))
		} else {
			fixed, broken := 0, 0
			for _, s := range a.Seeds {
				fixed, broken = fixed+s.Fixed, broken+s.Broken
			}
			unit := "seeds"
			if len(a.Seeds) > seeds {
				unit = "runs"
			}
			test = fmt.Sprintf("p < 0.01 in %d of %d %s (fixed %d, broken %d in all)", a.SignificantSeeds, len(a.Seeds), unit, fixed, broken)
		}
		fmt.Fprintf(&b, "| %s | %.3f | %s | %s | %s | %s | %s (%.2f) | %.1f → %.1f | %.3f → %s | %.3f → %s | %.1f |\n",
			a.Arm, a.AccBefore, pm(a.AccAfter, a.AccAfterCI, 3), pm(a.Gain, a.GainCI, 3), test,
			pm(a.Sampled, a.SampledCI, 1), pm(a.ZeroStd, a.ZeroStdCI, 2), a.ZeroStdBinary,
			a.TokensBefore, a.TokensAfter, a.ECEBefore, pm(a.ECEAfter, a.ECEAfterCI, 3),
			a.BrierBefore, pm(a.BrierAfter, a.BrierAfterCI, 3), a.SecondsPerStep)
	}
	var stating []ArmResult
	for _, a := range arms {
		if a.StatedAfter > 0 {
			stating = append(stating, a)
		}
	}
	if len(stating) > 0 {
		b.WriteString("\nStated confidence (`<confidence>q</confidence>`) in the held-out greedy completions after training, means over seeds:\n\n")
		b.WriteString("| arm | completions stating one | ECE of the stated | Brier of the stated |\n|---|---|---|---|\n")
		for _, a := range stating {
			fmt.Fprintf(&b, "| %s | %.2f | %.3f | %.3f |\n", a.Arm, a.StatedAfter, a.StatedECEAfter, a.StatedBrierAfter)
		}
	}
	runs := 0
	if len(arms) > 0 {
		runs = len(arms[0].Seeds)
	}
	switch {
	case runs > seeds && seeds > 0:
		fmt.Fprintf(&b, "\n%d runs (%d starts × %d seeds); ± is the half-width of a 95%% interval over runs (Student's t; runs of one start are not independent: see the split below).\n", runs, runs/seeds, seeds)
	case seeds > 1:
		fmt.Fprintf(&b, "\n%d seeds; ± is the half-width of a 95%% interval over seeds (Student's t).\n", seeds)
	}
	return b.String()
}

// PairedTable compares each arm with the first, seed by seed (same seed,
// same start, same held-out prompts): the mean difference ± a 95% interval
// over seeds of held-out accuracy after training, sampled length and
// zero-std fraction, and in how many seeds the arm's accuracy was higher,
// equal, lower. Empty with fewer than two arms or two seeds.
func PairedTable(arms []ArmResult) string {
	if len(arms) < 2 || len(arms[0].Seeds) < 2 {
		return ""
	}
	ref := arms[0]
	bySeed := map[string]SeedResult{}
	starts := map[string]bool{}
	for _, s := range ref.Seeds {
		bySeed[runKey(s)] = s
		starts[s.Start] = true
	}
	by, unit := "seed", "seeds"
	if len(starts) > 1 {
		by, unit = "start and seed", "runs"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| arm − %s (paired by %s) | Δ held-out accuracy | %s higher / equal / lower | Δ sampled tokens | Δ zero-std fraction |\n", ref.Arm, by, unit)
	b.WriteString("|---|---|---|---|---|\n")
	for _, a := range arms[1:] {
		var dAcc, dTok, dZero []float64
		hi, eq, lo := 0, 0, 0
		for _, s := range a.Seeds {
			r, ok := bySeed[runKey(s)]
			if !ok {
				continue
			}
			d := s.AccAfter - r.AccAfter
			dAcc = append(dAcc, d)
			dTok = append(dTok, s.SampledTokens-r.SampledTokens)
			dZero = append(dZero, s.ZeroStd-r.ZeroStd)
			switch {
			case d > 0:
				hi++
			case d < 0:
				lo++
			default:
				eq++
			}
		}
		m1, c1 := MeanCI95(dAcc)
		m2, c2 := MeanCI95(dTok)
		m3, c3 := MeanCI95(dZero)
		fmt.Fprintf(&b, "| %s | %s | %d / %d / %d | %s | %s |\n", a.Arm, pm(m1, c1, 3), hi, eq, lo, pm(m2, c2, 2), pm(m3, c3, 3))
	}
	return b.String()
}

// pm writes mean ± half-width with prec decimals (the mean alone when the
// interval is undefined).
func pm(mean, half float64, prec int) string {
	if math.IsNaN(half) {
		return fmt.Sprintf("%.*f", prec, mean)
	}
	return fmt.Sprintf("%.*f ± %.*f", prec, mean, prec, half)
}

func pValue(p float64) string {
	switch {
	case math.IsNaN(p):
		return "n/a"
	case p < 1e-4:
		return fmt.Sprintf("%.1e", p)
	}
	return fmt.Sprintf("%.4f", p)
}

func zeroIfNaN(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}

// runKey names a run of an arm for pairing: its start and seed.
func runKey(s SeedResult) string { return fmt.Sprintf("%s\x00%d", s.Start, s.Seed) }

// RunsTable lists every run (start, seed) with each arm's held-out accuracy
// after training, its McNemar counts and p, and each arm's difference from
// the first arm. Empty without runs.
func RunsTable(arms []ArmResult) string {
	if len(arms) == 0 || len(arms[0].Seeds) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| start | seed | held-out before |")
	for _, a := range arms {
		fmt.Fprintf(&b, " %s: after (fixed / broken, p) |", a.Arm)
	}
	for _, a := range arms[1:] {
		fmt.Fprintf(&b, " Δ %s − %s |", a.Arm, arms[0].Arm)
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", 2*len(arms)-1) + "\n")
	idx := make([]map[string]SeedResult, len(arms))
	for i, a := range arms {
		idx[i] = map[string]SeedResult{}
		for _, s := range a.Seeds {
			idx[i][runKey(s)] = s
		}
	}
	for _, ref := range arms[0].Seeds {
		fmt.Fprintf(&b, "| %s | %d | %.3f |", ref.Start, ref.Seed, ref.AccBefore)
		for i := range arms {
			if s, ok := idx[i][runKey(ref)]; ok {
				fmt.Fprintf(&b, " %.3f (%d / %d, %s) |", s.AccAfter, s.Fixed, s.Broken, pValue(s.McNemarP))
			} else {
				b.WriteString(" – |")
			}
		}
		for i := 1; i < len(arms); i++ {
			if s, ok := idx[i][runKey(ref)]; ok {
				fmt.Fprintf(&b, " %+.3f |", s.AccAfter-ref.AccAfter)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// VarComponents splits the spread of values grouped by start into a
// between-start and a within-start (between-seed) part: a one-way
// random-effects analysis of variance, σ²_seed = the mean within-start
// variance (n-1 divisor), σ²_start = max(0, var(start means) − σ²_seed/k)
// with k the mean number of values per start. NaN where undefined (fewer
// than two starts, or no start with two values).
func VarComponents(byStart map[string][]float64) (mean, sdStart, sdSeed float64) {
	var means, within []float64
	n, all := 0, 0.0
	for _, v := range byStart {
		if len(v) == 0 {
			continue
		}
		m, sd := confclip.MeanStd(v)
		means = append(means, m)
		if len(v) > 1 {
			within = append(within, sd*sd)
		}
		n += len(v)
		for _, x := range v {
			all += x
		}
	}
	if n == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	mean = all / float64(n)
	varSeed := math.NaN()
	if len(within) > 0 {
		varSeed, _ = confclip.MeanStd(within)
	}
	sdSeed = math.Sqrt(varSeed)
	sdStart = math.NaN()
	if len(means) > 1 {
		_, sdm := confclip.MeanStd(means)
		k := float64(n) / float64(len(means))
		v := sdm * sdm
		if !math.IsNaN(varSeed) {
			v -= varSeed / k
		}
		sdStart = math.Sqrt(max(0, v))
	}
	return mean, sdStart, sdSeed
}

// VarianceTable splits each arm's held-out gain, and each arm's accuracy
// after training minus the first arm's (paired by start and seed), into the
// spread between starts and between seeds of one start (VarComponents).
// Empty with fewer than two starts.
func VarianceTable(arms []ArmResult) string {
	if len(arms) == 0 {
		return ""
	}
	starts := map[string]bool{}
	for _, s := range arms[0].Seeds {
		starts[s.Start] = true
	}
	if len(starts) < 2 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| quantity | mean | sd between starts | sd between seeds (within a start) | starts' share of the variance |\n|---|---|---|---|---|\n")
	row := func(name string, by map[string][]float64) {
		m, st, se := VarComponents(by)
		share := st * st / (st*st + se*se)
		fmt.Fprintf(&b, "| %s | %+.3f | %.3f | %.3f | %s |\n", name, m, st, se, pmShare(share))
	}
	for _, a := range arms {
		by := map[string][]float64{}
		for _, s := range a.Seeds {
			by[s.Start] = append(by[s.Start], s.AccAfter-s.AccBefore)
		}
		row(a.Arm+" gain", by)
	}
	ref := map[string]SeedResult{}
	for _, s := range arms[0].Seeds {
		ref[runKey(s)] = s
	}
	for _, a := range arms[1:] {
		by := map[string][]float64{}
		for _, s := range a.Seeds {
			if r, ok := ref[runKey(s)]; ok {
				by[s.Start] = append(by[s.Start], s.AccAfter-r.AccAfter)
			}
		}
		row(a.Arm+" − "+arms[0].Arm+" (accuracy after)", by)
	}
	return b.String()
}

func pmShare(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}
