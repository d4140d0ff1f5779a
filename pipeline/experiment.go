package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/confclip/confclip/confclip"
)

// Arm is one configuration of an experiment: a reward and an advantage
// estimator; everything else is shared.
type Arm struct {
	Name      string
	Reward    string // reward.method
	Advantage string // advantage.estimator
}

// Arms are the arms `confclip experiment` knows by name.
var Arms = []Arm{
	{"binary_grpo", "binary", "grpo"},
	{"confclip_grpo", "confclip", "grpo"},
	{"confclip_dr_grpo", "confclip", "dr_grpo"},
	{"binary_dr_grpo", "binary", "dr_grpo"},
	{"confclip_rloo", "confclip", "rloo"},
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
	// Means and standard deviations over seeds (n-1 divisor; 0 for one seed).
	AccBefore, AccAfter, AccAfterStd       float64
	TokensBefore, TokensAfter, TokensStd   float64
	ZeroStd, ZeroStdBinary, SecondsPerStep float64
	Rows                                   []StepMetrics `json:"-"` // seed-averaged per step, for plots
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
	SecondsPerStep float64 `json:"seconds_per_step"`
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
// Markdown table (results.md), results.json and comparison plots.
func Experiment(ctx context.Context, cfg Config, log io.Writer) (ExperimentResult, error) {
	if log == nil {
		log = io.Discard
	}
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
	for _, arm := range arms {
		ar := ArmResult{Arm: arm.Name}
		var all [][]StepMetrics
		for _, seed := range cfg.Experiment.Seeds {
			c := cfg
			c.Reward.Method, c.Advantage.Estimator = arm.Reward, arm.Advantage
			c.Rollout.Seed, c.Train.Seed = seed, seed
			c.Run.Out = filepath.Join(cfg.Run.Out, arm.Name, fmt.Sprintf("seed-%d", seed))
			_, statErr := os.Stat(filepath.Join(c.Run.Out, RunConfigFile))
			fmt.Fprintf(log, "== %s, seed %d -> %s\n", arm.Name, seed, c.Run.Out)
			r, err := Run(ctx, RunOptions{Config: c, Resume: statErr == nil, Log: log})
			if err != nil {
				return res, fmt.Errorf("experiment %s seed %d: %w", arm.Name, seed, err)
			}
			ar.Seeds = append(ar.Seeds, seedResult(seed, r))
			all = append(all, r.Rows)
		}
		ar.summarise()
		ar.Rows = averageRows(all)
		res.Arms = append(res.Arms, ar)
	}
	res.Table = ExperimentTable(res.Arms, len(cfg.Experiment.Seeds))
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
	b, _ := json.MarshalIndent(res, "", "  ")
	return res, WriteFileAtomic(filepath.Join(cfg.Run.Out, "results.json"), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

func seedResult(seed uint64, r RunResult) SeedResult {
	s := SeedResult{Seed: seed, Dir: r.Dir, AccBefore: math.NaN(), AccAfter: math.NaN(), TokensBefore: math.NaN(), TokensAfter: math.NaN()}
	if r.Before != nil {
		s.AccBefore, s.TokensBefore = r.Before.Accuracy, r.Before.MeanTokens
	}
	if r.After != nil {
		s.AccAfter, s.TokensAfter = r.After.Accuracy, r.After.MeanTokens
	}
	var zs, zb, secs []float64
	for _, row := range r.Rows {
		if row.Step == 0 {
			continue
		}
		zs = append(zs, row.ZeroStdFrac)
		zb = append(zb, row.ZeroStdFracBinary)
		secs = append(secs, row.StepS)
	}
	s.ZeroStd, _ = meanStd(zs)
	s.ZeroStdBinary, _ = meanStd(zb)
	s.SecondsPerStep, _ = meanStd(secs)
	return s
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

// ExperimentTable formats the arms as a Markdown table.
func ExperimentTable(arms []ArmResult, seeds int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| arm | held-out accuracy before | after (mean ± std, %d seeds) | held-out tokens before | after | zero-std fraction (binary) | s/step |\n", seeds)
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, a := range arms {
		fmt.Fprintf(&b, "| %s | %.3f | %.3f ± %.3f | %.1f | %.1f ± %.1f | %.2f (%.2f) | %.1f |\n",
			a.Arm, a.AccBefore, a.AccAfter, zeroIfNaN(a.AccAfterStd), a.TokensBefore, a.TokensAfter, zeroIfNaN(a.TokensStd),
			a.ZeroStd, a.ZeroStdBinary, a.SecondsPerStep)
	}
	return b.String()
}

func zeroIfNaN(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}
