package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/internal/crashpoint"
	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/metrics"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/scoring"
	"github.com/confclip/confclip/train"
)

// Files and folders of a run folder.
const (
	RunConfigFile  = "config.toml"     // the effective configuration
	CheckpointFile = "checkpoint.json" // names the latest checkpoint
	InitAdapter    = "adapter-init.gguf"
)

// Checkpoint is the state a run resumes from. Everything random in a step
// (which prompts, every sequence's sampling stream) is derived from the seeds
// and the step number, so the step is the RNG state; the adapter's values and
// the AdamW moments are saved beside it.
type Checkpoint struct {
	Step      int    `json:"step"`
	Dir       string `json:"dir"`       // relative to the run folder
	Adapter   string `json:"adapter"`   // file in Dir
	Optimizer string `json:"optimizer"` // file in Dir
	Time      string `json:"time"`
}

// RunOptions says how to run the loop.
type RunOptions struct {
	Config Config
	Resume bool // continue from the run folder's checkpoint
	// Log receives one line per step (and notes); nil discards them.
	Log io.Writer
	// Live, when set, is told which stage a step is in ("step 3/20:
	// rollout"), for a status line rewritten in place on a terminal; Log
	// still gets each step's final line.
	Live func(line string)
	// Progress, when set, receives the loop's events: RunStage, RunStepDone
	// and RunNote.
	Progress func(Event)
	// StopAfter, when > 0, stops (as if killed) after that many steps of
	// this invocation; tests use it to check resumption.
	StopAfter int
	// BeforeFrom, when set, is a finished run folder whose evaluation
	// before training (step 0) this run reuses instead of repeating it:
	// an experiment's runs share the model, the held-out prompts and the
	// greedy settings, and a new adapter (B = 0) changes no logit, so
	// every run's step 0 is the same. Ignored with model.adapter set.
	BeforeFrom string
	// Remote, when set, samples each step's groups on these workers
	// ([rollout] endpoints, remote.go) instead of the local engine.
	Remote RemoteRollouts
	// Plot, when set, draws the metrics so far after every step and at the
	// end (reporting.RunPlots draws confclip run's charts); its files are
	// RunResult.Plots. Nil draws nothing.
	Plot RunPlotter
}

// RunPlotter draws a run's metrics rows into files in dir and returns
// their paths.
type RunPlotter func(cfg Config, rows []metrics.Step, dir string) ([]string, error)

// plot runs the options' plotter into the run folder's plots/.
func (o RunOptions) plot(cfg Config, rows []metrics.Step) ([]string, error) {
	if o.Plot == nil {
		return nil, nil
	}
	return o.Plot(cfg, rows, filepath.Join(cfg.Run.Out, "plots"))
}

// RunResult is what a run ended with.
type RunResult struct {
	Dir     string         `json:"dir"`
	Rows    []metrics.Step `json:"-"`
	Before  *EvalResult    `json:"before,omitempty"` // held-out evaluation before training
	After   *EvalResult    `json:"after,omitempty"`  // after the last step
	Plots   []string       `json:"plots"`
	Resumed int            `json:"resumed_from_step"`
}

// Run runs `confclip run`: for each step, rollouts with the current adapter,
// scoring, export, one training step, every eval_every steps a greedy
// evaluation on the held-out prompts; metrics, plots and a checkpoint after
// every step.
func Run(ctx context.Context, o RunOptions) (RunResult, error) {
	cfg := TrainingDefaults(o.Config)
	res := RunResult{Dir: cfg.Run.Out}
	r, err := startRun(cfg, o)
	if err != nil {
		return res, err
	}
	defer r.close()
	if r.ck != nil {
		res.Resumed = r.ck.Step
	}
	if err := r.evaluateBefore(ctx); err != nil {
		return res, err
	}
	runStart, done := time.Now(), 0
	for step := r.start + 1; step <= cfg.Run.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		crashpoint.At("step-start")
		row, err := r.step(ctx, step)
		if err != nil {
			return res, err
		}
		crashpoint.At("step-trained")
		if err := r.record(step, row); err != nil {
			return res, err
		}
		done++
		r.report(step, row, time.Duration(float64(time.Since(runStart))/float64(done)*float64(cfg.Run.Steps-step)))
		crashpoint.At("step-done")
		if o.StopAfter > 0 && done >= o.StopAfter && step < cfg.Run.Steps {
			return res, ErrStopped
		}
	}
	return r.finish(ctx, res)
}

// runner is a run's state between its stages: the checked configuration,
// the prompts, the model with the adapter being trained, its trainer and
// engines, and the metrics log.
type runner struct {
	cfg                       Config
	o                         RunOptions
	dir                       string
	logw                      io.Writer
	trainPrompts, evalPrompts []dataset.Prompt
	ck                        *Checkpoint // the checkpoint resumed from, or nil
	start                     int         // the last step done before this invocation
	h                         *Model
	tr                        *train.Trainer
	engine, greedy            *rollout.Engine // greedy is nil without held-out prompts
	mlog                      *metrics.Log
}

// startRun checks the configuration and the files it names (every key
// before anything exists on disk: a value that would fail in step 1 must
// not leave a run folder behind), reads the prompts, prepares the run
// folder, and opens the model with the run's adapter, the trainer (with the
// checkpoint's optimiser state), the engines and the metrics log.
func startRun(cfg Config, o RunOptions) (r *runner, err error) {
	r = &runner{cfg: cfg, o: o, dir: cfg.Run.Out, logw: o.Log}
	if r.logw == nil {
		r.logw = io.Discard
	}
	for _, check := range []func() error{
		func() error { return checkRunConfig(cfg) },
		cfg.Validate,
		func() error { return checkRunFiles(cfg) },
		func() error { return checkRemote(cfg, o.Remote) },
	} {
		if err := check(); err != nil {
			return nil, err
		}
	}
	if r.trainPrompts, err = readPrompts(cfg.Data.Train, cfg.Data.Map); err != nil {
		return nil, err
	}
	if cfg.Data.Eval != "" {
		if r.evalPrompts, err = readPrompts(cfg.Data.Eval, cfg.Data.Map); err != nil {
			return nil, err
		}
	}
	if r.ck, err = prepareRunDir(cfg, o.Resume); err != nil {
		return nil, err
	}
	opened := r // each failure below returns a nil runner
	defer func() {
		if err != nil {
			opened.close()
		}
	}()
	if err := r.openModel(); err != nil {
		return nil, err
	}
	if err := r.openTrainer(); err != nil {
		return nil, err
	}
	// The handle's engines sample with its adapter, the one trained here.
	if r.engine, err = r.h.engine(EngineOptions(cfg)); err != nil {
		return nil, err
	}
	if len(r.evalPrompts) > 0 {
		if r.greedy, err = r.h.engine(GreedyOptions(cfg)); err != nil {
			return nil, err
		}
	}
	// Rows after the checkpoint are redone, so they are dropped; without a
	// checkpoint that includes step 0's evaluation.
	kept := -1
	if r.ck != nil {
		r.start, kept = r.ck.Step, r.ck.Step
	}
	if r.mlog, err = metrics.OpenLog(r.dir, kept); err != nil {
		return nil, err
	}
	return r, nil
}

// openModel opens the model for training (no repacking, precision
// warnings) with the run's adapter: the checkpoint's, model.adapter, or a
// new one.
func (r *runner) openModel() error {
	cfg := r.cfg
	mc := cfg.Model
	mc.Adapter = "" // the run's own adapter is loaded below
	h, err := openModelFor(mc, true)
	if err != nil {
		return err
	}
	r.h = h
	adapterPath := filepath.Join(r.dir, InitAdapter)
	switch {
	case r.ck != nil:
		adapterPath = filepath.Join(r.dir, r.ck.Dir, r.ck.Adapter)
		note := fmt.Sprintf("resuming %s at step %d of %d (checkpoint %s)", r.dir, r.ck.Step+1, cfg.Run.Steps, r.ck.Dir)
		fmt.Fprintln(r.logw, note)
		emit(r.o.Progress, RunNote{Text: note})
	case cfg.Model.Adapter != "":
		adapterPath = cfg.Model.Adapter
	default:
		if err := train.CreateLoRA(h.llm, adapterPath, cfg.Train); err != nil {
			return err
		}
		crashpoint.At("init-adapter-written")
	}
	return h.LoadAdapter(adapterPath)
}

// openTrainer makes the adapter's trainer, with the checkpoint's
// optimiser state when resuming.
func (r *runner) openTrainer() error {
	tr, err := train.NewLoRATrainer(r.h.llm, r.h.adapter, trainerConfig(r.cfg))
	if err != nil {
		return err
	}
	r.tr = tr
	fmt.Fprintln(r.logw, tr.Sizing())
	emit(r.o.Progress, RunNote{Text: tr.Sizing()})
	if r.ck == nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(r.dir, r.ck.Dir, r.ck.Optimizer))
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := tr.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("checkpoint %s: %w", r.ck.Dir, err)
	}
	return nil
}

// close frees what startRun opened, the last first.
func (r *runner) close() {
	if r.mlog != nil {
		r.mlog.Close()
	}
	if r.tr != nil {
		r.tr.Close()
	}
	if r.h != nil {
		r.h.Close()
	}
}

// evaluate runs the held-out evaluation of a step into its folder; nil
// without held-out prompts.
func (r *runner) evaluate(ctx context.Context, step int) (*EvalResult, error) {
	if r.greedy == nil {
		return nil, nil
	}
	res, err := evaluateEngines(ctx, r.cfg, r.greedy, r.cfg.Data.Eval, r.evalPrompts, filepath.Join(r.dir, "steps", fmt.Sprintf("%04d", step), "eval"), r.o.Progress, step, r.cfg.Run.Steps)
	if err != nil {
		return nil, fmt.Errorf("step %d: evaluation: %w", step, err)
	}
	// Its KV cache is not held until the next evaluation.
	if err := r.greedy.Release(); err != nil {
		return nil, err
	}
	return &res, nil
}

// evaluateBefore records step 0, the held-out evaluation before training
// (reused from RunOptions.BeforeFrom when it can be), on a run's first
// invocation.
func (r *runner) evaluateBefore(ctx context.Context) error {
	if r.start != 0 || r.greedy == nil {
		return nil
	}
	ev, err := reuseBefore(r.o.BeforeFrom, r.dir, r.cfg)
	if ev == nil && err == nil {
		emit(r.o.Progress, RunNote{Text: fmt.Sprintf("step 0: held-out evaluation of %s (%s), before training", english.Count(len(r.evalPrompts), "prompt"), r.cfg.Data.Eval)})
		ev, err = r.evaluate(ctx, 0)
	}
	if err != nil {
		return err
	}
	row := metrics.Missing()
	row.Step = 0
	row.EvalAccuracy = &ev.Accuracy
	row.EvalMeanTokens = &ev.MeanTokens
	if err := r.mlog.Append(row); err != nil {
		return err
	}
	crashpoint.At("eval0-recorded")
	line := fmt.Sprintf("step 0: held-out accuracy %.3f, mean tokens %.1f (before training)", ev.Accuracy, ev.MeanTokens)
	fmt.Fprintln(r.logw, line)
	emit(r.o.Progress, RunNote{Text: line})
	return nil
}

// stage tells RunOptions.Live and Progress which stage a step is in.
func (r *runner) stage(step int, name string) {
	if r.o.Live != nil {
		r.o.Live(fmt.Sprintf("step %d/%d: %s", step, r.cfg.Run.Steps, name))
	}
	emit(r.o.Progress, RunStage{Step: step, Steps: r.cfg.Run.Steps, Stage: name})
}

// step runs one step (runStep: rollout, scoring, export, training), then
// the held-out evaluation when one is due.
func (r *runner) step(ctx context.Context, step int) (metrics.Step, error) {
	cfg := r.cfg
	minStd := StdFilter(cfg.Advantage, r.mlog.Rows())
	row, err := runStep(ctx, cfg, step, r.trainPrompts, r.engine, r.tr, func(name string) { r.stage(step, name) }, remoteOf(r.o.Remote, r.h), minStd)
	if err != nil {
		return row, err
	}
	if cfg.Run.EvalEvery > 0 && (step%cfg.Run.EvalEvery == 0 || step == cfg.Run.Steps) {
		r.stage(step, "held-out evaluation")
		ev, err := r.evaluate(ctx, step)
		if err != nil {
			return row, err
		}
		if ev != nil {
			row.EvalAccuracy = &ev.Accuracy
			row.EvalMeanTokens = &ev.MeanTokens
		}
	}
	return row, nil
}

// StdFilter is the group-std threshold of the next step under
// advantage.std_filter_beta (RLPR's filter, the authors' EMA mode): beta
// times the moving average of the earlier steps' mean group std, started at
// the first step's and moved by (1 - std_filter_ema) of each later step's;
// 0 (no filter) when beta is 0 or no step has run. Rows without a mean
// group std (step 0's evaluation, a row from before the metric) are passed
// over. A resumed run recomputes it from its metrics.
func StdFilter(a scoring.AdvantageConfig, rows []metrics.Step) float64 {
	if a.StdFilterBeta <= 0 {
		return 0
	}
	ema, seen := 0.0, false
	for _, r := range rows {
		switch x := r.GroupStdMean; {
		case math.IsNaN(x):
		case !seen:
			ema, seen = x, true
		default:
			ema = a.StdFilterEMA*ema + (1-a.StdFilterEMA)*x
		}
	}
	return a.StdFilterBeta * ema
}

// record keeps a step: its metrics row first, then the checkpoint (a stop
// between the two redoes the step, whose row is dropped on resume, instead
// of losing the row), then the plots.
func (r *runner) record(step int, row metrics.Step) error {
	if err := r.mlog.Append(row); err != nil {
		return err
	}
	crashpoint.At("metrics-recorded")
	if err := saveCheckpoint(r.dir, step, r.h.adapter, r.h.llm.Architecture(), r.tr); err != nil {
		return err
	}
	_, err := r.o.plot(r.cfg, r.mlog.Rows())
	return err
}

// report writes a step's line and sends RunStepDone.
func (r *runner) report(step int, row metrics.Step, eta time.Duration) {
	fmt.Fprintln(r.logw, stepLine(row, r.cfg.Run.Steps, eta))
	emit(r.o.Progress, RunStepDone{Steps: r.cfg.Run.Steps, Metrics: row, ETA: eta})
}

// finish ends a run that did every step: the remote workers' report, the
// final plots, the evaluations before and after.
func (r *runner) finish(ctx context.Context, res RunResult) (RunResult, error) {
	if r.o.Remote != nil {
		if err := finishRemote(ctx, r.o.Remote, r.dir); err != nil {
			return res, err
		}
	}
	res.Rows = r.mlog.Rows()
	var err error
	if res.Plots, err = r.o.plot(r.cfg, res.Rows); err != nil {
		return res, err
	}
	res.Before, res.After = evalAt(r.dir, res.Rows, 0), evalAt(r.dir, res.Rows, r.cfg.Run.Steps)
	return res, nil
}

// reuseBefore copies the step-0 evaluation of the run folder from into dir
// and returns its result; nil when there is nothing to reuse.
func reuseBefore(from, dir string, cfg Config) (*EvalResult, error) {
	if from == "" || cfg.Model.Adapter != "" {
		return nil, nil
	}
	rows, err := metrics.Read(filepath.Join(from, metrics.JSONLFile))
	if err != nil || len(rows) == 0 || rows[0].Step != 0 || rows[0].EvalAccuracy == nil {
		return nil, nil
	}
	src := filepath.Join(from, "steps", "0000", "eval")
	dst := filepath.Join(dir, "steps", "0000", "eval")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return nil, nil
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := atomicfile.Write(filepath.Join(dst, e.Name()), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return nil, err
		}
	}
	ev := &EvalResult{Accuracy: *rows[0].EvalAccuracy}
	if rows[0].EvalMeanTokens != nil {
		ev.MeanTokens = *rows[0].EvalMeanTokens
	}
	return ev, nil
}

// ErrStopped is returned when RunOptions.StopAfter ended a run early.
var ErrStopped = errors.New("run stopped early (StopAfter)")

func evalAt(dir string, rows []metrics.Step, step int) *EvalResult {
	for _, r := range rows {
		if r.Step == step && r.EvalAccuracy != nil {
			ev := &EvalResult{Accuracy: *r.EvalAccuracy}
			if r.EvalMeanTokens != nil {
				ev.MeanTokens = *r.EvalMeanTokens
			}
			ev.calibrationFrom(filepath.Join(dir, "steps", fmt.Sprintf("%04d", step), "eval", "greedy.scored.jsonl"))
			return ev
		}
	}
	return nil
}

// calibrationFrom fills in the calibration of an evaluation (the
// confidence estimator's ECE, Brier and AUROC; the stated confidences')
// and its prompt count from its greedy scored records, where the metrics
// row has only the accuracy; a file that cannot be read leaves them unset.
func (ev *EvalResult) calibrationFrom(path string) {
	recs, _, _, err := dataset.ReadFile[dataset.Scored](path, false)
	if err != nil || len(recs) == 0 {
		return
	}
	var c EvalResult
	for _, r := range recs {
		c.Cases = append(c.Cases, EvalCase{ID: r.PromptID, Correct: r.VerifierResult.Correct, Confidence: r.Confidence,
			Text: r.Text, Tokens: len(r.Tokens)})
	}
	c.SetStats()
	ev.Prompts, ev.ECE, ev.Brier, ev.AUROC = c.Prompts, c.ECE, c.Brier, c.AUROC
	ev.Stated, ev.StatedECE, ev.StatedBrier = c.Stated, c.StatedECE, c.StatedBrier
}

func stepLine(r metrics.Step, steps int, eta time.Duration) string {
	ev := ""
	if r.EvalAccuracy != nil {
		ev = fmt.Sprintf(", held-out %.3f", *r.EvalAccuracy)
	}
	train := fmt.Sprintf("loss %.4g, grad %.3g", r.Loss, r.GradNorm)
	switch {
	case r.TrainSkipped == 1:
		train = "no update (every advantage zero)"
	case r.Updates > 1 || (!math.IsNaN(r.KL) && r.KL > 0):
		train += fmt.Sprintf(", %d updates, clipped %.2f, KL %.3g", r.Updates, r.ClipFrac, r.KL)
	}
	return fmt.Sprintf("step %d/%d: accuracy %.3f%s, reward %.3f, zero-std %.2f (binary %.2f), tokens %.1f, %s, %.0f tokens/s, %.1fs, ETA %s",
		r.Step, steps, r.Accuracy, ev, r.MeanReward, r.ZeroStdFrac, r.ZeroStdFracBinary, r.MeanTokens, train, r.TokensPerS, r.StepS, eta.Round(time.Second))
}

// runStep does one step's rollouts, scoring, export and training.
func runStep(ctx context.Context, cfg Config, step int, prompts []dataset.Prompt, e *rollout.Engine, tr *train.Trainer, stage func(string), rem *remoteRun, minStd float64) (metrics.Step, error) {
	t0 := time.Now()
	sdir := filepath.Join(cfg.Run.Out, "steps", fmt.Sprintf("%04d", step))
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return metrics.Step{}, err
	}
	stage("rollout")
	batch := dataset.StepPrompts(prompts, cfg.Run.PromptsPerStep, cfg.Rollout.Seed, step)
	rolls := filepath.Join(sdir, "rollouts.jsonl")
	adapter := stepAdapter(cfg, step)
	rst, err := stepRollouts(ctx, cfg, step, batch, e, rem, rolls, adapter)
	if err != nil {
		return metrics.Step{}, fmt.Errorf("step %d: rollout: %w", step, err)
	}
	if rst.Records == 0 {
		return metrics.Step{}, fmt.Errorf("step %d: no completions (%v)", step, firstErrors(rst.Errors))
	}
	t1 := time.Now()
	stage("scoring")
	trainSet := filepath.Join(sdir, "train.jsonl")
	sum, esum, err := stepScore(ctx, cfg, e, rem, rolls, filepath.Join(sdir, "scored.jsonl"), trainSet, adapter, minStd)
	if err != nil {
		return metrics.Step{}, fmt.Errorf("step %d: %w", step, err)
	}
	t2 := time.Now()
	recs, err := dataset.ReadTrainExamples(trainSet)
	if err != nil {
		return metrics.Step{}, err
	}
	row := StepMetricsOf(step, sum)
	row.StdFilter, row.StdFiltered = minStd, esum.LowStdGroups
	row.RolloutS = t1.Sub(t0).Seconds()
	row.ScoreS = t2.Sub(t1).Seconds()
	row.TokensPerS = rst.TokensPerSecond()
	row.TeacherForced = sum.TeacherForced
	if rem != nil {
		row.Retries, row.Workers = rem.report()
	}
	row.TrainSkipped = 1
	if len(recs) > 0 {
		stage("training")
		// One stage's buffers at a time: the engine's KV cache while the
		// trainer's activations are held, and those while it samples.
		if e != nil {
			if err := e.Release(); err != nil {
				return metrics.Step{}, err
			}
		}
		err := trainStep(ctx, tr, recs, &row)
		if err == nil {
			err = tr.Release()
		}
		if err != nil {
			return metrics.Step{}, fmt.Errorf("step %d: train: %w", step, err)
		}
	}
	row.TrainS = time.Since(t2).Seconds()
	row.StepS = time.Since(t0).Seconds()
	return row, nil
}

// stepAdapter is the adapter a step's rollouts are sampled with (their
// provenance): the state after the previous step.
func stepAdapter(cfg Config, step int) string {
	switch {
	case step > 1:
		return filepath.Join(cfg.Run.Out, fmt.Sprintf("checkpoints/step-%04d/adapter.gguf", step-1))
	case cfg.Model.Adapter != "":
		return cfg.Model.Adapter
	}
	return filepath.Join(cfg.Run.Out, InitAdapter)
}

// stepScore scores a step's rollouts into scored and exports its training
// set to trainSet (groups of a std under minStd left out).
func stepScore(ctx context.Context, cfg Config, e *rollout.Engine, rem *remoteRun, rolls, scored, trainSet, adapter string, minStd float64) (scoring.Summary, ExportSummary, error) {
	so := NewScoreOptions(cfg, rolls, scored)
	if rem != nil {
		so.Model = rem.m // records that came without log-probs
	}
	if rw, err := confclip.NewReward(cfg.Reward.Method, confclip.DefaultRewardParams); err == nil && rw.AnswerProb && e != nil {
		// the reference answer after each completion's reasoning, under
		// the policy that sampled it
		so.TeacherForce = e.TeacherForce
	}
	sum, err := Score(ctx, so)
	if err != nil {
		return sum, ExportSummary{}, fmt.Errorf("score: %w", err)
	}
	eo, err := NewExportOptions(cfg, scored, trainSet)
	if err != nil {
		return sum, ExportSummary{}, err
	}
	// The step's adapter; the model is not hashed at every step.
	eo.Format, eo.Model, eo.Adapter = dataset.FormatJSONL, "", adapter
	eo.MinGroupStd = minStd
	esum, err := Export(eo)
	if err != nil {
		return sum, esum, fmt.Errorf("export: %w", err)
	}
	return sum, esum, nil
}

// stepRollouts samples a step's groups into rolls, on the remote workers
// when there are some, else on the local engine.
func stepRollouts(ctx context.Context, cfg Config, step int, batch []dataset.Prompt, e *rollout.Engine, rem *remoteRun, rolls, adapter string) (rollout.Stats, error) {
	if rem != nil {
		return remoteStep(ctx, cfg, rem.src, e, step, batch, rolls, adapter)
	}
	// Every step samples afresh: the engine's seed moves with the step.
	e.SetSeed(stepSeed(cfg, step))
	return writeStepRollouts(ctx, e.Generate, e, batch, rolls)
}

// trainStep is a step's policy-gradient update on its training set, with
// its statistics in row.
func trainStep(ctx context.Context, tr *train.Trainer, recs []dataset.TrainExample, row *metrics.Step) error {
	exs := Examples(recs)
	for i := range exs {
		// The rollouts were sampled with the adapter being trained: the
		// first update is on-policy and its own forward gives the old
		// log-probs (the export's are the sampler's, which differ from
		// the model's under top-k/top-p).
		exs[i].OldLogProbs = nil
	}
	sts, err := tr.Update(ctx, exs)
	if err != nil {
		return err
	}
	if sts[0].Skipped {
		return nil
	}
	row.TrainSkipped = 0
	row.Updates = len(sts)
	row.Loss, row.GradNorm, row.LR = sts[0].Objective, sts[0].GradNorm, sts[0].LR
	row.TrainZeroWeight = sts[0].ZeroWeight
	var clip, kl float64
	for _, st := range sts {
		clip += st.ClipFrac
		kl += st.KL
	}
	row.ClipFrac, row.KL = clip/float64(len(sts)), kl/float64(len(sts))
	return nil
}

// readPrompts reads a prompt file and refuses one whose ids repeat: scoring
// groups completions by prompt id, so two prompts with one id would merge
// into one group.
func readPrompts(path, fieldMap string) ([]dataset.Prompt, error) {
	if path == "" {
		return nil, errors.New("no training prompts given ([data] train)")
	}
	pf, err := dataset.ReadPromptFile(path, fieldMap, false)
	if err != nil {
		return nil, err
	}
	ps, lines := pf.Prompts, pf.Lines
	if len(ps) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	line := make(map[string]int, len(ps))
	for i, p := range ps {
		if first, dup := line[p.ID]; dup {
			return nil, fmt.Errorf("%s: line %d: prompt id %q already used on line %d (ids must be unique)", path, lines[i], p.ID, first)
		}
		line[p.ID] = lines[i]
	}
	return ps, nil
}

func checkRunConfig(cfg Config) error {
	switch {
	case cfg.Model.Path == "":
		return ErrNoModel
	case cfg.Run.Out == "":
		return errors.New("no run folder given ([run] out)")
	case cfg.Run.Steps < 1:
		return fmt.Errorf("run.steps = %d: want at least 1", cfg.Run.Steps)
	case cfg.Rollout.Group < 2:
		return fmt.Errorf("rollout.group = %d: group advantages need at least 2 completions per prompt", cfg.Rollout.Group)
	}
	return nil
}

// prepareRunDir creates the run folder, or on resume checks that the
// configuration is the one the run started with and returns its checkpoint.
func prepareRunDir(cfg Config, resume bool) (*Checkpoint, error) {
	dir := cfg.Run.Out
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(cfg); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, RunConfigFile)
	old, err := os.ReadFile(cfgPath)
	switch {
	case err == nil && !resume && runStarted(dir):
		return nil, fmt.Errorf("%s already holds a run: resume it with --resume, or choose another [run] out", dir)
	case err == nil && resume:
		diff, err := runConfigDiff(old, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		if len(diff) > 0 {
			return nil, fmt.Errorf("%s: the run was started with another configuration (%s): %v; resume with the same one", dir, cfgPath, diff)
		}
		var ck *Checkpoint
		b, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
		switch {
		case errors.Is(err, os.ErrNotExist): // killed before its first checkpoint: start over
		case err != nil:
			return nil, err
		default:
			ck = new(Checkpoint)
			if err := json.Unmarshal(b, ck); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CheckpointFile), err)
			}
			if ck.Step > cfg.Run.Steps {
				return nil, fmt.Errorf("%s: the run has done %d steps, more than run.steps = %d: to extend it, resume with more steps (--steps %d or more)", dir, ck.Step, cfg.Run.Steps, ck.Step+1)
			}
		}
		if !bytes.Equal(old, buf.Bytes()) { // more steps: the folder says so
			if err := atomicfile.Write(cfgPath, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
				return nil, err
			}
		}
		return ck, nil
	case errors.Is(err, os.ErrNotExist) && resume:
		return nil, fmt.Errorf("%s: nothing to resume (no %s)", dir, RunConfigFile)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(cfgPath, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return nil, err
	}
	crashpoint.At("run-folder-created")
	return nil, nil
}

// saveCheckpoint writes the adapter and the optimiser state into a new
// folder, then points checkpoint.json at it (written atomically), then
// removes the folder before it: a run killed at any moment leaves a
// complete checkpoint.
func saveCheckpoint(dir string, step int, a *llama.Adapter, arch string, tr *train.Trainer) error {
	name := fmt.Sprintf("checkpoints/step-%04d", step)
	final := filepath.Join(dir, name)
	tmp := final + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := train.SaveLoRA(a, arch, filepath.Join(tmp, "adapter.gguf")); err != nil {
		return err
	}
	opt, err := tr.MarshalBinary()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(tmp, "optimizer.bin"), func(w io.Writer) error { _, err := w.Write(opt); return err }); err != nil {
		return err
	}
	crashpoint.At("checkpoint-files")
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	crashpoint.At("checkpoint-renamed")
	var prev Checkpoint
	if b, err := os.ReadFile(filepath.Join(dir, CheckpointFile)); err == nil {
		// A record that does not parse names no folder to remove: the
		// sweep of checkpoints/ below removes it anyway.
		if err := json.Unmarshal(b, &prev); err != nil {
			prev = Checkpoint{}
		}
	}
	ck := Checkpoint{Step: step, Dir: name, Adapter: "adapter.gguf", Optimizer: "optimizer.bin", Time: time.Now().UTC().Format(time.RFC3339)}
	if err := atomicfile.WriteJSON(filepath.Join(dir, CheckpointFile), ck); err != nil {
		return err
	}
	crashpoint.At("checkpoint-recorded")
	if prev.Dir != "" && prev.Dir != name {
		os.RemoveAll(filepath.Join(dir, prev.Dir))
	}
	// What a stop left behind (a folder of a checkpoint that was never
	// recorded, or whose removal was cut short) goes too.
	if ents, err := os.ReadDir(filepath.Join(dir, "checkpoints")); err == nil {
		for _, e := range ents {
			if e.Name() != filepath.Base(name) {
				os.RemoveAll(filepath.Join(dir, "checkpoints", e.Name()))
			}
		}
	}
	return nil
}

// StepMetricsOf starts a step's metrics from the summary of scoring its
// rollouts: accuracy, reward statistics, zero-std fractions (chosen and
// binary), completion lengths and the scoring time. Training and timing
// fields are left missing for the run loop to fill. The mean length of right
// (or wrong) completions is missing when there are none, rather than 0.
func StepMetricsOf(step int, s scoring.Summary) metrics.Step {
	m := metrics.Missing()
	m.Step = step
	o := s.Outcomes
	m.Accuracy = o.Accuracy
	m.MeanReward, m.RewardStd = s.Reward.Mean, s.Reward.Std
	m.GroupStdMean = s.Reward.GroupStdMean
	m.ZeroStdFrac, m.ZeroStdFracBinary = s.Reward.ZeroStdFraction, s.Binary.ZeroStdFraction
	right, wrong := float64(o.Correct), float64(o.Completions-o.Correct)
	if right > 0 {
		m.MeanTokensRight = o.MeanTokensRight
	}
	if wrong > 0 {
		m.MeanTokensWrong = o.MeanTokensWrong
	}
	switch {
	case right > 0 && wrong > 0:
		m.MeanTokens = (right*o.MeanTokensRight + wrong*o.MeanTokensWrong) / (right + wrong)
	case right > 0:
		m.MeanTokens = o.MeanTokensRight
	case wrong > 0:
		m.MeanTokens = o.MeanTokensWrong
	}
	m.ScoreS = s.Seconds
	return m
}
