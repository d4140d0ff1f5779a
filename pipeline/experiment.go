package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/jsonnull"
)

// Arm is one configuration of an experiment: a reward, an advantage
// estimator and its scale; everything else is shared.
type Arm struct {
	Name      string
	Reward    string // reward.method
	Advantage string // advantage.estimator
	Scale     string // advantage.scale
}

// Arms are the arms `confclip experiment` knows by name. ConfClip with GRPO
// divides by the batch's std: with each group's own std, a weak model's
// all-wrong groups turn tiny confidence differences into full-size
// advantages and collapse (docs/method.md, "Our reading: ConfClip with
// GRPO's std"); confclip_grpo_group is that variant, kept for comparison.
var Arms = []Arm{
	{"binary_grpo", "binary", "grpo", "group"},
	{"confclip_grpo", "confclip", "grpo", "batch"},
	{"confclip_grpo_group", "confclip", "grpo", "group"},
	{"binary_grpo_batch", "binary", "grpo", "batch"},
	{"confclip_dr_grpo", "confclip", "dr_grpo", "group"},
	{"binary_dr_grpo", "binary", "dr_grpo", "group"},
	{"confclip_rloo", "confclip", "rloo", "group"},
}

func armByName(name string) (Arm, error) {
	for _, a := range Arms {
		if a.Name == name {
			return a, nil
		}
	}
	var names []string
	for _, a := range Arms {
		names = append(names, a.Name)
	}
	return Arm{}, fmt.Errorf("unknown arm %q (known: %s)", name, strings.Join(names, ", "))
}

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
	// SignificantSeeds counts the seeds whose held-out gain has a paired
	// McNemar p < 0.01.
	SignificantSeeds int
	Rows             []StepMetrics `json:"-"` // seed-averaged per step, for plots
}

// SeedResult is one run of an arm.
type SeedResult struct {
	Seed           uint64  `json:"seed"`
	Dir            string  `json:"dir"`
	AccBefore      float64 `json:"held_out_accuracy_before"`
	AccAfter       float64 `json:"held_out_accuracy_after"`
	TokensBefore   float64 `json:"held_out_tokens_before"`
	TokensAfter    float64 `json:"held_out_tokens_after"`
	ZeroStd        float64 `json:"zero_std_frac"`        // mean over steps
	ZeroStdBinary  float64 `json:"zero_std_frac_binary"` // mean over steps
	SampledTokens  float64 `json:"sampled_tokens"`       // mean over steps of the rollouts' mean length
	SecondsPerStep float64 `json:"seconds_per_step"`
	SkippedSteps   int     `json:"skipped_steps"` // steps whose advantages were all zero
	// Fixed and Broken count the held-out prompts wrong before training
	// and right after, and the reverse; McNemarP is the paired test's
	// p-value (McNemar).
	Fixed    int     `json:"fixed"`
	Broken   int     `json:"broken"`
	McNemarP float64 `json:"mcnemar_p"`
	// correct holds the per-prompt verdicts after training, for the
	// paired comparison of arms.
	correct map[string]bool
}

// ExperimentResult is a whole experiment.
type ExperimentResult struct {
	Dir   string      `json:"dir"`
	Arms  []ArmResult `json:"arms"`
	Table string      `json:"table"` // Markdown
	Plots []string    `json:"plots"`
}

// Experiment runs every arm with every seed from the same start (model,
// initial adapter seed, data), each as a `confclip run` in
// OUT/ARM/seed-N (resumed where a run folder already exists), then writes a
// Markdown table (results.md), results.json and comparison plots. Progress,
// when set, receives an ExperimentRun event as each run starts, then that
// run's own events (RunStage, RunStepDone, RunNote).
func Experiment(ctx context.Context, cfg Config, progress func(Event)) (ExperimentResult, error) {
	if progress == nil {
		progress = func(Event) {}
	}
	cfg = TrainingDefaults(cfg)
	res := ExperimentResult{Dir: cfg.Run.Out}
	if len(cfg.Experiment.Arms) == 0 || len(cfg.Experiment.Seeds) == 0 {
		return res, errors.New("experiment: no arms or no seeds ([experiment] arms, seeds)")
	}
	var arms []Arm
	for _, n := range cfg.Experiment.Arms {
		a, err := armByName(n)
		if err != nil {
			return res, fmt.Errorf("experiment: %w", err)
		}
		arms = append(arms, a)
	}
	// Seed-major order: an interrupted experiment holds whole pairs.
	armRes := make([]ArmResult, len(arms))
	all := make([][][]StepMetrics, len(arms))
	before := "" // a finished run whose step-0 evaluation the others reuse
	for _, seed := range cfg.Experiment.Seeds {
		for ai, arm := range arms {
			c := cfg
			c.Reward.Method, c.Advantage.Estimator, c.Advantage.Scale = arm.Reward, arm.Advantage, arm.Scale
			c.Rollout.Seed, c.Train.Seed = seed, seed
			c.Run.Out = filepath.Join(cfg.Run.Out, arm.Name, fmt.Sprintf("seed-%d", seed))
			// A run records its own arm and seed, not the grid's: an
			// experiment given more seeds or arms resumes its finished runs.
			c.Experiment = ExperimentConfig{Arms: []string{arm.Name}, Seeds: []uint64{seed}}
			_, statErr := os.Stat(filepath.Join(c.Run.Out, RunConfigFile))
			progress(ExperimentRun{Arm: arm.Name, Seed: seed, Dir: c.Run.Out})
			r, err := Run(ctx, RunOptions{Config: c, Resume: statErr == nil, Progress: progress, BeforeFrom: before})
			if err != nil {
				return res, fmt.Errorf("experiment %s seed %d: %w", arm.Name, seed, err)
			}
			before = c.Run.Out
			sr, err := seedResult(seed, r, c.Run.Steps)
			if err != nil {
				return res, fmt.Errorf("experiment %s seed %d: %w", arm.Name, seed, err)
			}
			armRes[ai].Arm = arm.Name
			armRes[ai].Seeds = append(armRes[ai].Seeds, sr)
			all[ai] = append(all[ai], r.Rows)
		}
	}
	for ai := range arms {
		ar := armRes[ai]
		ar.summarise()
		ar.Rows = averageRows(all[ai])
		res.Arms = append(res.Arms, ar)
	}
	res.Table = ExperimentTable(res.Arms, len(cfg.Experiment.Seeds)) + "\n" + PairedTable(res.Arms)
	arms2 := map[string][]StepMetrics{}
	for _, a := range res.Arms {
		arms2[a.Arm] = a.Rows
	}
	var err error
	if res.Plots, err = PlotCompare(arms2, filepath.Join(cfg.Run.Out, "plots")); err != nil {
		return res, err
	}
	if err := WriteFileAtomic(filepath.Join(cfg.Run.Out, "results.md"), func(w io.Writer) error {
		_, err := io.WriteString(w, res.Table)
		return err
	}); err != nil {
		return res, err
	}
	// A metric without data is NaN (a seed that did not evaluate, say):
	// written as null, where encoding/json would refuse the whole file.
	b, err := jsonnull.MarshalIndent(res, "", "  ")
	if err != nil {
		return res, fmt.Errorf("results.json: %w", err)
	}
	return res, WriteFileAtomic(filepath.Join(cfg.Run.Out, "results.json"), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

func seedResult(seed uint64, r RunResult, steps int) (SeedResult, error) {
	s := SeedResult{Seed: seed, Dir: r.Dir, AccBefore: math.NaN(), AccAfter: math.NaN(), TokensBefore: math.NaN(), TokensAfter: math.NaN(), McNemarP: math.NaN()}
	if r.Before != nil {
		s.AccBefore, s.TokensBefore = r.Before.Accuracy, r.Before.MeanTokens
	}
	if r.After != nil {
		s.AccAfter, s.TokensAfter = r.After.Accuracy, r.After.MeanTokens
	}
	var zs, zb, secs, toks []float64
	for _, row := range r.Rows {
		if row.Step == 0 {
			continue
		}
		zs = append(zs, row.ZeroStdFrac)
		zb = append(zb, row.ZeroStdFracBinary)
		secs = append(secs, row.StepS)
		toks = append(toks, row.MeanTokens)
		s.SkippedSteps += row.TrainSkipped
	}
	s.ZeroStd, _ = meanStd(zs)
	s.ZeroStdBinary, _ = meanStd(zb)
	s.SecondsPerStep, _ = meanStd(secs)
	s.SampledTokens, _ = meanStd(toks)
	if r.Before != nil && r.After != nil {
		before, err := EvalVerdicts(r.Dir, 0)
		if err != nil {
			return s, err
		}
		if s.correct, err = EvalVerdicts(r.Dir, steps); err != nil {
			return s, err
		}
		s.Fixed, s.Broken, s.McNemarP = McNemar(before, s.correct)
	}
	return s, nil
}

// EvalVerdicts reads which held-out prompts the greedy evaluation of a
// run's step got right, by prompt id.
func EvalVerdicts(runDir string, step int) (map[string]bool, error) {
	path := filepath.Join(runDir, "steps", fmt.Sprintf("%04d", step), "eval", "greedy.scored.jsonl")
	recs, _, _, err := dataset.ReadFile[dataset.Scored](path, false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(recs))
	for _, r := range recs {
		out[r.PromptID] = r.VerifierResult.Correct
	}
	return out, nil
}

func (a *ArmResult) summarise() {
	col := func(f func(SeedResult) float64) []float64 {
		var v []float64
		for _, s := range a.Seeds {
			v = append(v, f(s))
		}
		return v
	}
	a.AccBefore, _ = meanStd(col(func(s SeedResult) float64 { return s.AccBefore }))
	a.AccAfter, a.AccAfterStd = meanStd(col(func(s SeedResult) float64 { return s.AccAfter }))
	_, a.AccAfterCI = MeanCI95(col(func(s SeedResult) float64 { return s.AccAfter }))
	a.Gain, a.GainCI = MeanCI95(col(func(s SeedResult) float64 { return s.AccAfter - s.AccBefore }))
	a.Sampled, a.SampledCI = MeanCI95(col(func(s SeedResult) float64 { return s.SampledTokens }))
	_, a.ZeroStdCI = MeanCI95(col(func(s SeedResult) float64 { return s.ZeroStd }))
	for _, s := range a.Seeds {
		if s.McNemarP < 0.01 {
			a.SignificantSeeds++
		}
	}
	a.TokensBefore, _ = meanStd(col(func(s SeedResult) float64 { return s.TokensBefore }))
	a.TokensAfter, a.TokensStd = meanStd(col(func(s SeedResult) float64 { return s.TokensAfter }))
	a.ZeroStd, _ = meanStd(col(func(s SeedResult) float64 { return s.ZeroStd }))
	a.ZeroStdBinary, _ = meanStd(col(func(s SeedResult) float64 { return s.ZeroStdBinary }))
	a.SecondsPerStep, _ = meanStd(col(func(s SeedResult) float64 { return s.SecondsPerStep }))
}

// meanStd is the mean and the n-1 standard deviation of the finite values
// (NaN when there are none: a seed whose run had no evaluation).
func meanStd(v []float64) (mean, std float64) {
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

// averageRows averages the runs' metrics step by step (for the comparison
// plots).
func averageRows(runs [][]StepMetrics) []StepMetrics {
	bySteps := map[int][]StepMetrics{}
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
	var out []StepMetrics
	for _, s := range steps {
		rs := bySteps[s]
		m := MissingMetrics()
		m.Step = s
		avg := func(f func(StepMetrics) float64) float64 {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			x, _ := meanStd(v)
			return x
		}
		m.Accuracy = avg(func(r StepMetrics) float64 { return r.Accuracy })
		m.MeanReward = avg(func(r StepMetrics) float64 { return r.MeanReward })
		m.ZeroStdFrac = avg(func(r StepMetrics) float64 { return r.ZeroStdFrac })
		m.ZeroStdFracBinary = avg(func(r StepMetrics) float64 { return r.ZeroStdFracBinary })
		m.MeanTokens = avg(func(r StepMetrics) float64 { return r.MeanTokens })
		ev := avg(func(r StepMetrics) float64 {
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
// summed counts), and the mean sampled completion length and zero-std
// fraction over the steps; ± is a 95% interval over seeds.
func ExperimentTable(arms []ArmResult, seeds int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| arm | held-out accuracy before | after | gain | paired test of the gain (McNemar) | sampled tokens | zero-std fraction (binary) | held-out tokens before → after | s/step |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
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
			test = fmt.Sprintf("p < 0.01 in %d of %d seeds (fixed %d, broken %d in all)", a.SignificantSeeds, len(a.Seeds), fixed, broken)
		}
		fmt.Fprintf(&b, "| %s | %.3f | %s | %s | %s | %s | %s (%.2f) | %.1f → %.1f | %.1f |\n",
			a.Arm, a.AccBefore, pm(a.AccAfter, a.AccAfterCI, 3), pm(a.Gain, a.GainCI, 3), test,
			pm(a.Sampled, a.SampledCI, 1), pm(a.ZeroStd, a.ZeroStdCI, 2), a.ZeroStdBinary,
			a.TokensBefore, a.TokensAfter, a.SecondsPerStep)
	}
	if seeds > 1 {
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
	bySeed := map[uint64]SeedResult{}
	for _, s := range ref.Seeds {
		bySeed[s.Seed] = s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| arm − %s (paired by seed) | Δ held-out accuracy | seeds higher / equal / lower | Δ sampled tokens | Δ zero-std fraction |\n", ref.Arm)
	b.WriteString("|---|---|---|---|---|\n")
	for _, a := range arms[1:] {
		var dAcc, dTok, dZero []float64
		hi, eq, lo := 0, 0, 0
		for _, s := range a.Seeds {
			r, ok := bySeed[s.Seed]
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
