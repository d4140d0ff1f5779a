package experiments

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

	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/internal/jsonnull"
	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/reporting"
	"github.com/confclip/confclip/tools"
)

// ExperimentResult is a whole experiment.
type ExperimentResult struct {
	Dir   string                `json:"dir"`
	Arms  []reporting.ArmResult `json:"arms"`
	Table string                `json:"table"` // Markdown
	Plots []string              `json:"plots"`
}

// Experiment runs every arm with every seed from the same start (model,
// initial adapter seed, data), each as a `confclip run` in
// OUT/ARM/seed-N (resumed where a run folder already exists), then writes a
// Markdown table (results.md), results.json and comparison plots. With
// experiment.starts, the grid is run from each start in
// OUT/START/ARM/seed-N (pre-training seed starts are trained first, into
// OUT/starts, and reused while their settings match). Progress, when set,
// receives an ArmRun event as each run starts, then that run's own
// events (RunStage, RunStepDone, RunNote).
func Experiment(ctx context.Context, f File, progress func(pipeline.Event)) (ExperimentResult, error) {
	if progress == nil {
		progress = func(pipeline.Event) {}
	}
	cfg := pipeline.TrainingDefaults(f.Config)
	grid := f.Experiment
	res := ExperimentResult{Dir: cfg.Run.Out}
	arms, err := gridArms(grid)
	if err != nil {
		return res, err
	}
	starts := grid.Starts
	if len(starts) == 0 {
		starts = []Start{{Path: cfg.Model.Path}}
	}
	// Start-major, then seed-major order: an interrupted experiment holds
	// whole pairs.
	armRes := make([]reporting.ArmResult, len(arms))
	all := make([][][]metrics.Step, len(arms))
	for _, start := range starts {
		model, err := startModel(ctx, cfg, grid, start, progress)
		if err != nil {
			return res, fmt.Errorf("experiment: start %s: %w", start.Name(), err)
		}
		startName, base := "", cfg.Run.Out
		if len(grid.Starts) > 0 {
			startName, base = start.Name(), filepath.Join(cfg.Run.Out, start.Name())
		}
		before := "" // a finished run of this start whose step-0 evaluation the others reuse
		for _, seed := range grid.Seeds {
			for ai, arm := range arms {
				c := armConfig(cfg, model, base, arm, seed)
				_, statErr := os.Stat(filepath.Join(c.Run.Out, pipeline.RunConfigFile))
				progress(ArmRun{Start: startName, Arm: arm.Name, Seed: seed, Dir: c.Run.Out})
				r, err := pipeline.Run(ctx, pipeline.RunOptions{Config: c, Resume: statErr == nil, Progress: progress, BeforeFrom: before, Plot: reporting.RunPlots})
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
		ar.Summarise()
		ar.Rows = reporting.AverageRows(all[ai])
		res.Arms = append(res.Arms, ar)
	}
	res.Table = reporting.ExperimentTable(res.Arms, len(grid.Seeds)) + "\n" + reporting.PairedTable(res.Arms)
	if len(grid.Starts) > 0 {
		res.Table += "\n" + reporting.RunsTable(res.Arms) + "\n" + reporting.VarianceTable(res.Arms)
	}
	err = res.write(cfg.Run.Out)
	return res, err
}

// gridArms checks the grid ([experiment]'s rows) and returns its arms.
func gridArms(grid Config) ([]Arm, error) {
	if len(grid.Arms) == 0 || len(grid.Seeds) == 0 {
		return nil, errors.New("experiment: no arms or no seeds ([experiment] arms, seeds)")
	}
	if err := settings.Run(grid, Checks()); err != nil {
		return nil, fmt.Errorf("experiment: %w", err)
	}
	arms := make([]Arm, len(grid.Arms))
	for i, n := range grid.Arms {
		a, err := ArmByName(n)
		if err != nil { // not after the checks above, which refuse an unknown arm
			return nil, fmt.Errorf("experiment: %w", err)
		}
		arms[i] = a
	}
	return arms, nil
}

// ArmRun is sent as an experiment starts (or resumes) one arm's run with
// one seed (from Start, with experiment.starts), in Dir.
type ArmRun struct {
	pipeline.EventBase
	Start string
	Arm   string
	Seed  uint64
	Dir   string
}

// armConfig is the configuration of one run of the grid: the arm's reward
// and advantage, the seed, from the start's model, in base/ARM/seed-N.
func armConfig(cfg pipeline.Config, model, base string, arm Arm, seed uint64) pipeline.Config {
	c := cfg
	c.Model.Path = model
	c.Reward.Method, c.Advantage.Estimator, c.Advantage.Scale = arm.Reward, arm.Advantage, arm.Scale
	c.Reward.SelfCertaintyWeight = arm.SelfCertaintyWeight
	c.Train.EntropyCoef = arm.EntropyCoef
	c.Rollout.Seed, c.Train.Seed = seed, seed
	// The run's folder names its arm and seed; its config.toml holds the
	// run's tables, not the grid, so an experiment given more seeds, arms
	// or starts resumes its finished runs.
	c.Run.Out = filepath.Join(base, arm.Name, fmt.Sprintf("seed-%d", seed))
	return c
}

// write writes the comparison plots, results.md and results.json into dir.
func (res *ExperimentResult) write(dir string) error {
	arms := map[string][]metrics.Step{}
	for _, a := range res.Arms {
		arms[a.Arm] = a.Rows
	}
	var err error
	if res.Plots, err = reporting.PlotCompare(arms, filepath.Join(dir, "plots")); err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, "results.md"), func(w io.Writer) error {
		_, err := io.WriteString(w, res.Table)
		return err
	}); err != nil {
		return err
	}
	// A metric without data is NaN (a seed that did not evaluate, say):
	// written as null, where encoding/json would refuse the whole file.
	b, err := jsonnull.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	return atomicfile.Write(filepath.Join(dir, "results.json"), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

func seedResult(seed uint64, r pipeline.RunResult, steps int) (reporting.SeedResult, error) {
	s := reporting.SeedResult{Seed: seed, Dir: r.Dir, AccBefore: math.NaN(), AccAfter: math.NaN(), TokensBefore: math.NaN(), TokensAfter: math.NaN(), McNemarP: math.NaN(),
		ECEBefore: math.NaN(), ECEAfter: math.NaN(), BrierBefore: math.NaN(), BrierAfter: math.NaN(),
		StatedAfter: math.NaN(), StatedECEAfter: math.NaN(), StatedBrierAfter: math.NaN()}
	if r.Before != nil {
		s.AccBefore, s.TokensBefore = r.Before.Accuracy, r.Before.MeanTokens
		s.ECEBefore, s.BrierBefore = orNaN(r.Before.ECE), orNaN(r.Before.Brier)
	}
	if r.After != nil {
		s.AccAfter, s.TokensAfter = r.After.Accuracy, r.After.MeanTokens
		s.ECEAfter, s.BrierAfter = orNaN(r.After.ECE), orNaN(r.After.Brier)
		if r.After.Prompts > 0 {
			s.StatedAfter = float64(r.After.Stated) / float64(r.After.Prompts)
		}
		s.StatedECEAfter, s.StatedBrierAfter = orNaN(r.After.StatedECE), orNaN(r.After.StatedBrier)
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
	s.ZeroStd, _ = reporting.MeanStd(zs)
	s.ZeroStdBinary, _ = reporting.MeanStd(zb)
	s.SecondsPerStep, _ = reporting.MeanStd(secs)
	s.SampledTokens, _ = reporting.MeanStd(toks)
	if r.Before != nil && r.After != nil {
		before, err := pipeline.EvalVerdicts(r.Dir, 0)
		if err != nil {
			return s, err
		}
		after, err := pipeline.EvalVerdicts(r.Dir, steps)
		if err != nil {
			return s, err
		}
		s.Fixed, s.Broken, s.McNemarP = reporting.McNemar(before, after)
	}
	return s, nil
}

// orNaN is *p, or NaN where there is no value.
func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func startPrefix(name string) string {
	if name == "" {
		return ""
	}
	return name + " "
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
func startModel(ctx context.Context, cfg pipeline.Config, e Config, s Start, progress func(pipeline.Event)) (string, error) {
	if s.Path != "" {
		return s.Path, nil
	}
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
				progress(pipeline.RunNote{Text: fmt.Sprintf("start %s: pre-trained model %s (cached)", s.Name(), out)})
				return out, nil
			}
		}
	}
	corpus, err := tools.ReadCorpus(e.Corpus)
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
	progress(pipeline.RunNote{Text: fmt.Sprintf("start %s: pre-training on %s (%d steps of %d texts, lr %g, seed %d) -> %s",
		s.Name(), e.Corpus, e.PretrainSteps, e.PretrainBatch, e.PretrainLR, s.Seed, out)})
	if err := tools.Pretrain(ctx, tools.PretrainOptions{Out: out, Spec: tools.PretrainSpec(startEmbd, startLayers, startHeads, s.Seed), Corpus: corpus,
		Steps: e.PretrainSteps, BatchSeqs: e.PretrainBatch, LR: e.PretrainLR, Seed: s.Seed, Threads: cfg.Model.Threads}); err != nil {
		return "", err
	}
	return out, atomicfile.WriteJSON(stampPath, stamp)
}
