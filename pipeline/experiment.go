package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/jsonnull"
)

// Start is one entry of experiment.starts: a pre-training seed (a TOML
// integer) or a model path (a TOML string).
type Start struct {
	Seed uint64
	Path string
}

// UnmarshalTOML reads an integer as a pre-training seed, a string as a path.
func (s *Start) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("start %d: a pre-training seed is 0 or more", x)
		}
		*s = Start{Seed: uint64(x)}
	case string:
		if x == "" {
			return errors.New("start \"\": want a model path or a pre-training seed")
		}
		*s = Start{Path: x}
	default:
		return fmt.Errorf("start %v: want a pre-training seed (integer) or a model path (string)", v)
	}
	return nil
}

// MarshalTOML writes a start as it is read.
func (s Start) MarshalTOML() ([]byte, error) {
	if s.Path != "" {
		return []byte(strconv.Quote(s.Path)), nil
	}
	return []byte(strconv.FormatUint(s.Seed, 10)), nil
}

// Name is the start's folder name in an experiment: pretrain-seed-N, or the
// model file's name without .gguf.
func (s Start) Name() string {
	if s.Path != "" {
		return strings.TrimSuffix(filepath.Base(s.Path), ".gguf")
	}
	return fmt.Sprintf("pretrain-seed-%d", s.Seed)
}

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
	Start          string  `json:"start,omitempty"` // the start's name, with experiment.starts
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
// Markdown table (results.md), results.json and comparison plots. With
// experiment.starts, the grid is run from each start in
// OUT/START/ARM/seed-N (pre-training seed starts are trained first, into
// OUT/starts, and reused while their settings match). Progress, when set,
// receives an ExperimentRun event as each run starts, then that run's own
// events (RunStage, RunStepDone, RunNote).
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
	if err := checkStarts(cfg.Experiment); err != nil {
		return res, fmt.Errorf("experiment: %w", err)
	}
	starts := cfg.Experiment.Starts
	if len(starts) == 0 {
		starts = []Start{{Path: cfg.Model.Path}}
	}
	// Start-major, then seed-major order: an interrupted experiment holds
	// whole pairs.
	armRes := make([]ArmResult, len(arms))
	all := make([][][]StepMetrics, len(arms))
	for _, start := range starts {
		model, err := startModel(ctx, cfg, start, progress)
		if err != nil {
			return res, fmt.Errorf("experiment: start %s: %w", start.Name(), err)
		}
		startName, base := "", cfg.Run.Out
		if len(cfg.Experiment.Starts) > 0 {
			startName, base = start.Name(), filepath.Join(cfg.Run.Out, start.Name())
		}
		before := "" // a finished run of this start whose step-0 evaluation the others reuse
		for _, seed := range cfg.Experiment.Seeds {
			for ai, arm := range arms {
				c := cfg
				c.Model.Path = model
				c.Reward.Method, c.Advantage.Estimator, c.Advantage.Scale = arm.Reward, arm.Advantage, arm.Scale
				c.Rollout.Seed, c.Train.Seed = seed, seed
				c.Run.Out = filepath.Join(base, arm.Name, fmt.Sprintf("seed-%d", seed))
				// A run records its own arm and seed, not the grid's: an
				// experiment given more seeds, arms or starts resumes its
				// finished runs.
				c.Experiment = ExperimentConfig{Arms: []string{arm.Name}, Seeds: []uint64{seed}}
				_, statErr := os.Stat(filepath.Join(c.Run.Out, RunConfigFile))
				progress(ExperimentRun{Start: startName, Arm: arm.Name, Seed: seed, Dir: c.Run.Out})
				r, err := Run(ctx, RunOptions{Config: c, Resume: statErr == nil, Progress: progress, BeforeFrom: before})
				if err != nil {
					return res, fmt.Errorf("experiment %s%s seed %d: %w", startPrefix(startName), arm.Name, seed, err)
				}
				before = c.Run.Out
				sr, err := seedResult(seed, r, c.Run.Steps)
				if err != nil {
					return res, fmt.Errorf("experiment %s%s seed %d: %w", startPrefix(startName), arm.Name, seed, err)
				}
				sr.Start = startName
				armRes[ai].Arm = arm.Name
				armRes[ai].Seeds = append(armRes[ai].Seeds, sr)
				all[ai] = append(all[ai], r.Rows)
			}
		}
	}
	for ai := range arms {
		ar := armRes[ai]
		ar.summarise()
		ar.Rows = averageRows(all[ai])
		res.Arms = append(res.Arms, ar)
	}
	res.Table = ExperimentTable(res.Arms, len(cfg.Experiment.Seeds)) + "\n" + PairedTable(res.Arms)
	if len(cfg.Experiment.Starts) > 0 {
		res.Table += "\n" + RunsTable(res.Arms) + "\n" + VarianceTable(res.Arms)
	}
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
			unit := "seeds"
			if len(a.Seeds) > seeds {
				unit = "runs"
			}
			test = fmt.Sprintf("p < 0.01 in %d of %d %s (fixed %d, broken %d in all)", a.SignificantSeeds, len(a.Seeds), unit, fixed, broken)
		}
		fmt.Fprintf(&b, "| %s | %.3f | %s | %s | %s | %s | %s (%.2f) | %.1f → %.1f | %.1f |\n",
			a.Arm, a.AccBefore, pm(a.AccAfter, a.AccAfterCI, 3), pm(a.Gain, a.GainCI, 3), test,
			pm(a.Sampled, a.SampledCI, 1), pm(a.ZeroStd, a.ZeroStdCI, 2), a.ZeroStdBinary,
			a.TokensBefore, a.TokensAfter, a.SecondsPerStep)
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

func startPrefix(name string) string {
	if name == "" {
		return ""
	}
	return name + " "
}

// checkStarts checks experiment.starts: distinct folder names, and the
// pre-training settings when a start is a seed.
func checkStarts(e ExperimentConfig) error {
	var errs []error
	names := map[string]int{}
	seeds := false
	for i, s := range e.Starts {
		if j, dup := names[s.Name()]; dup {
			errs = append(errs, fmt.Errorf("experiment.starts: entries %d and %d have the same name %q (the start's folder)", j+1, i+1, s.Name()))
		}
		names[s.Name()] = i
		seeds = seeds || s.Path == ""
	}
	if seeds {
		if e.Corpus == "" {
			errs = append(errs, errors.New("experiment.corpus: a pre-training seed in experiment.starts needs the corpus to pre-train on"))
		}
		if e.PretrainSteps < 1 || e.PretrainBatch < 1 {
			errs = append(errs, fmt.Errorf("experiment.pretrain_steps, pretrain_batch = %d, %d: want at least 1 each", e.PretrainSteps, e.PretrainBatch))
		}
		if !(e.PretrainLR > 0) || math.IsInf(e.PretrainLR, 0) {
			errs = append(errs, fmt.Errorf("experiment.pretrain_lr = %g: want a positive learning rate", e.PretrainLR))
		}
	}
	return errors.Join(errs...)
}

// pretrainStamp records what a cached start was pre-trained from; a start
// is reused only while its stamp matches.
type pretrainStamp struct {
	Corpus       string  `json:"corpus"`
	CorpusSHA256 string  `json:"corpus_sha256"`
	Steps        int     `json:"steps"`
	Batch        int     `json:"batch"`
	LR           float64 `json:"lr"`
	Seed         uint64  `json:"seed"`
	Embd         int     `json:"embd"`
	Layers       int     `json:"layers"`
	Heads        int     `json:"heads"`
}

// The architecture of pre-trained starts: confclip pretrain's defaults.
const startEmbd, startLayers, startHeads = 64, 2, 4

// startModel is the model file of a start: its path, or for a pre-training
// seed the model pre-trained on experiment.corpus (as confclip pretrain
// --seed N with the experiment's settings), cached in run.out/starts.
func startModel(ctx context.Context, cfg Config, s Start, progress func(Event)) (string, error) {
	if s.Path != "" {
		return s.Path, nil
	}
	e := cfg.Experiment
	raw, err := os.ReadFile(e.Corpus)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	stamp := pretrainStamp{Corpus: e.Corpus, CorpusSHA256: hex.EncodeToString(sum[:]), Steps: e.PretrainSteps, Batch: e.PretrainBatch,
		LR: e.PretrainLR, Seed: s.Seed, Embd: startEmbd, Layers: startLayers, Heads: startHeads}
	dir := filepath.Join(cfg.Run.Out, "starts")
	out := filepath.Join(dir, s.Name()+".gguf")
	stampPath := filepath.Join(dir, s.Name()+".json")
	if b, err := os.ReadFile(stampPath); err == nil {
		var old pretrainStamp
		if json.Unmarshal(b, &old) == nil && old == stamp {
			if _, err := os.Stat(out); err == nil {
				progress(RunNote{Text: fmt.Sprintf("start %s: pre-trained model %s (cached)", s.Name(), out)})
				return out, nil
			}
		}
	}
	corpus, err := ReadCorpus(e.Corpus)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The stamp goes first and comes back last: an interrupted
	// pre-training leaves no stamp, so it is done again.
	if err := os.Remove(stampPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	progress(RunNote{Text: fmt.Sprintf("start %s: pre-training on %s (%d steps of %d texts, lr %g, seed %d) -> %s",
		s.Name(), e.Corpus, e.PretrainSteps, e.PretrainBatch, e.PretrainLR, s.Seed, out)})
	if err := Pretrain(ctx, PretrainOptions{Out: out, Spec: PretrainSpec(startEmbd, startLayers, startHeads, s.Seed), Corpus: corpus,
		Steps: e.PretrainSteps, BatchSeqs: e.PretrainBatch, LR: e.PretrainLR, Seed: s.Seed, Threads: cfg.Model.Threads}); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(stamp, "", "  ")
	if err != nil {
		return "", err
	}
	return out, WriteFileAtomic(stampPath, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
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
