package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/english"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/rollout"
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
type RunPlotter func(cfg Config, rows []StepMetrics, dir string) ([]string, error)

// plot runs the options' plotter into the run folder's plots/.
func (o RunOptions) plot(cfg Config, rows []StepMetrics) ([]string, error) {
	if o.Plot == nil {
		return nil, nil
	}
	return o.Plot(cfg, rows, filepath.Join(cfg.Run.Out, "plots"))
}

// RunResult is what a run ended with.
type RunResult struct {
	Dir     string        `json:"dir"`
	Rows    []StepMetrics `json:"-"`
	Before  *EvalResult   `json:"before,omitempty"` // held-out evaluation before training
	After   *EvalResult   `json:"after,omitempty"`  // after the last step
	Plots   []string      `json:"plots"`
	Resumed int           `json:"resumed_from_step"`
}

// Run runs `confclip run`: for each step, rollouts with the current adapter,
// scoring, export, one training step, every eval_every steps a greedy
// evaluation on the held-out prompts; metrics, plots and a checkpoint after
// every step.
func Run(ctx context.Context, o RunOptions) (RunResult, error) {
	cfg := TrainingDefaults(o.Config)
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	dir := cfg.Run.Out
	res := RunResult{Dir: dir}
	if err := checkRunConfig(cfg); err != nil {
		return res, err
	}
	// Every key before anything exists on disk: a value that would fail in
	// step 1 must not leave a run folder behind.
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if err := checkRunFiles(cfg); err != nil {
		return res, err
	}
	if err := checkRemote(cfg, o.Remote); err != nil {
		return res, err
	}
	trainPrompts, err := readPrompts(cfg.Data.Train, cfg.Data.Map)
	if err != nil {
		return res, err
	}
	var evalPrompts []dataset.Prompt
	if cfg.Data.Eval != "" {
		if evalPrompts, err = readPrompts(cfg.Data.Eval, cfg.Data.Map); err != nil {
			return res, err
		}
	}
	ck, err := prepareRunDir(cfg, o.Resume)
	if err != nil {
		return res, err
	}

	mc := cfg.Model
	mc.Adapter = ""                  // the run's own adapter is loaded below
	h, err := openModelFor(mc, true) // to train: no repacking, precision warnings
	if err != nil {
		return res, err
	}
	defer h.Close()
	m := h.llm
	adapterPath := filepath.Join(dir, InitAdapter)
	switch {
	case ck != nil:
		adapterPath = filepath.Join(dir, ck.Dir, ck.Adapter)
		res.Resumed = ck.Step
		note := fmt.Sprintf("resuming %s at step %d of %d (checkpoint %s)", dir, ck.Step+1, cfg.Run.Steps, ck.Dir)
		fmt.Fprintln(logw, note)
		emit(o.Progress, RunNote{Text: note})
	case cfg.Model.Adapter != "":
		adapterPath = cfg.Model.Adapter
	default:
		if err := train.CreateLoRA(m, adapterPath, LoRAConfig(cfg)); err != nil {
			return res, err
		}
		crashPoint("init-adapter-written")
	}
	if err := h.LoadAdapter(adapterPath); err != nil {
		return res, err
	}
	a := h.adapter

	tr, err := train.NewLoRATrainer(m, a, TrainerConfig(cfg))
	if err != nil {
		return res, err
	}
	defer tr.Close()
	if ck != nil {
		b, err := os.ReadFile(filepath.Join(dir, ck.Dir, ck.Optimizer))
		if err != nil {
			return res, fmt.Errorf("checkpoint: %w", err)
		}
		if err := tr.UnmarshalBinary(b); err != nil {
			return res, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
	}
	// The handle's engines sample with its adapter, the one trained here.
	engine, err := h.engine(EngineOptions(cfg))
	if err != nil {
		return res, err
	}
	var greedy *rollout.Engine
	if len(evalPrompts) > 0 {
		if greedy, err = h.engine(GreedyOptions(cfg)); err != nil {
			return res, err
		}
	}

	// Rows after the checkpoint are redone, so they are dropped; without a
	// checkpoint that includes step 0's evaluation.
	start, kept := 0, -1
	if ck != nil {
		start, kept = ck.Step, ck.Step
	}
	mlog, err := OpenMetricsLog(dir, kept)
	if err != nil {
		return res, err
	}
	defer mlog.Close()
	evaluate := func(step int) (*EvalResult, error) {
		if greedy == nil {
			return nil, nil
		}
		r, err := evaluateEngines(ctx, cfg, greedy, cfg.Data.Eval, evalPrompts, filepath.Join(dir, "steps", fmt.Sprintf("%04d", step), "eval"), o.Progress, step, cfg.Run.Steps)
		if err != nil {
			return nil, fmt.Errorf("step %d: evaluation: %w", step, err)
		}
		return &r, nil
	}
	if start == 0 && greedy != nil {
		ev, err := reuseBefore(o.BeforeFrom, dir, cfg)
		if ev == nil && err == nil {
			emit(o.Progress, RunNote{Text: fmt.Sprintf("step 0: held-out evaluation of %s (%s), before training", english.Count(len(evalPrompts), "prompt"), cfg.Data.Eval)})
			ev, err = evaluate(0)
		}
		if err != nil {
			return res, err
		}
		row := MissingMetrics()
		row.Step = 0
		row.EvalAccuracy = &ev.Accuracy
		row.EvalMeanTokens = &ev.MeanTokens
		if err := mlog.Append(row); err != nil {
			return res, err
		}
		crashPoint("eval0-recorded")
		fmt.Fprintf(logw, "step 0: held-out accuracy %.3f, mean tokens %.1f (before training)\n", ev.Accuracy, ev.MeanTokens)
		emit(o.Progress, RunNote{Text: fmt.Sprintf("step 0: held-out accuracy %.3f, mean tokens %.1f (before training)", ev.Accuracy, ev.MeanTokens)})
	}

	runStart := time.Now()
	done := 0
	for step := start + 1; step <= cfg.Run.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		crashPoint("step-start")
		stage := func(name string) {
			if o.Live != nil {
				o.Live(fmt.Sprintf("step %d/%d: %s", step, cfg.Run.Steps, name))
			}
			emit(o.Progress, RunStage{Step: step, Steps: cfg.Run.Steps, Stage: name})
		}
		row, err := runStep(ctx, cfg, step, trainPrompts, engine, tr, stage, remoteOf(o.Remote, h))
		if err != nil {
			return res, err
		}
		if cfg.Run.EvalEvery > 0 && (step%cfg.Run.EvalEvery == 0 || step == cfg.Run.Steps) {
			stage("held-out evaluation")
			ev, err := evaluate(step)
			if err != nil {
				return res, err
			}
			if ev != nil {
				row.EvalAccuracy = &ev.Accuracy
				row.EvalMeanTokens = &ev.MeanTokens
			}
		}
		crashPoint("step-trained")
		// The row first, then the checkpoint: a stop between the two redoes
		// the step (its row is dropped on resume) instead of losing the row.
		if err := mlog.Append(row); err != nil {
			return res, err
		}
		crashPoint("metrics-recorded")
		if err := saveCheckpoint(dir, step, a, m.Architecture(), tr); err != nil {
			return res, err
		}
		if _, err := o.plot(cfg, mlog.Rows()); err != nil {
			return res, err
		}
		done++
		eta := time.Duration(float64(time.Since(runStart)) / float64(done) * float64(cfg.Run.Steps-step))
		line := stepLine(row, cfg.Run.Steps, eta)
		fmt.Fprintln(logw, line)
		emit(o.Progress, RunStepDone{Steps: cfg.Run.Steps, Metrics: row, ETA: eta})
		crashPoint("step-done")
		if o.StopAfter > 0 && done >= o.StopAfter && step < cfg.Run.Steps {
			return res, ErrStopped
		}
	}
	if o.Remote != nil {
		if err := finishRemote(ctx, o.Remote, dir); err != nil {
			return res, err
		}
	}
	res.Rows = mlog.Rows()
	res.Plots, err = o.plot(cfg, res.Rows)
	if err != nil {
		return res, err
	}
	res.Before, res.After = evalAt(dir, res.Rows, 0), evalAt(dir, res.Rows, cfg.Run.Steps)
	return res, nil
}

// reuseBefore copies the step-0 evaluation of the run folder from into dir
// and returns its result; nil when there is nothing to reuse.
func reuseBefore(from, dir string, cfg Config) (*EvalResult, error) {
	if from == "" || cfg.Model.Adapter != "" {
		return nil, nil
	}
	rows, err := ReadMetrics(filepath.Join(from, MetricsJSONL))
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
		if err := WriteFileAtomic(filepath.Join(dst, e.Name()), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
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

func evalAt(dir string, rows []StepMetrics, step int) *EvalResult {
	for _, r := range rows {
		if r.Step == step && r.EvalAccuracy != nil {
			ev := &EvalResult{Accuracy: *r.EvalAccuracy}
			if r.EvalMeanTokens != nil {
				ev.MeanTokens = *r.EvalMeanTokens
			}
			return ev
		}
	}
	return nil
}

func stepLine(r StepMetrics, steps int, eta time.Duration) string {
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
func runStep(ctx context.Context, cfg Config, step int, prompts []dataset.Prompt, e *rollout.Engine, tr *train.Trainer, stage func(string), rem *remoteRun) (StepMetrics, error) {
	t0 := time.Now()
	sdir := filepath.Join(cfg.Run.Out, "steps", fmt.Sprintf("%04d", step))
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return StepMetrics{}, err
	}
	stage("rollout")
	batch := stepPrompts(prompts, cfg.Run.PromptsPerStep, cfg.Rollout.Seed, step)
	rolls := filepath.Join(sdir, "rollouts.jsonl")
	// Provenance: the adapter the rollouts were sampled with is the state
	// after the previous step.
	adapter := filepath.Join(cfg.Run.Out, InitAdapter)
	if cfg.Model.Adapter != "" {
		adapter = cfg.Model.Adapter
	}
	if step > 1 {
		adapter = filepath.Join(cfg.Run.Out, fmt.Sprintf("checkpoints/step-%04d/adapter.gguf", step-1))
	}
	var rst rollout.Stats
	var err error
	if rem != nil {
		rst, err = remoteStep(ctx, cfg, rem.src, e, step, batch, rolls, adapter)
	} else {
		// Every step samples afresh: the engine's seed moves with the step.
		e.SetSeed(stepSeed(cfg, step))
		rst, err = writeStepRollouts(ctx, e.Generate, e, batch, rolls)
	}
	if err != nil {
		return StepMetrics{}, fmt.Errorf("step %d: rollout: %w", step, err)
	}
	if rst.Records == 0 {
		return StepMetrics{}, fmt.Errorf("step %d: no completions (%v)", step, firstErrors(rst.Errors))
	}
	t1 := time.Now()
	stage("scoring")
	scored := filepath.Join(sdir, "scored.jsonl")
	so := NewScoreOptions(cfg, rolls, scored)
	if rem != nil {
		so.Model = rem.m // records that came without log-probs
	}
	sum, err := Score(ctx, so)
	if err != nil {
		return StepMetrics{}, fmt.Errorf("step %d: score: %w", step, err)
	}
	trainSet := filepath.Join(sdir, "train.jsonl")
	eo, err := NewExportOptions(cfg, scored, trainSet)
	if err != nil {
		return StepMetrics{}, fmt.Errorf("step %d: %w", step, err)
	}
	// The step's adapter; the model is not hashed at every step.
	eo.Format, eo.Model, eo.Adapter = dataset.FormatJSONL, "", adapter
	if _, err := Export(eo); err != nil {
		return StepMetrics{}, fmt.Errorf("step %d: export: %w", step, err)
	}
	t2 := time.Now()
	recs, err := dataset.ReadTrainExamples(trainSet)
	if err != nil {
		return StepMetrics{}, err
	}
	row := StepMetricsOf(step, sum)
	row.RolloutS = t1.Sub(t0).Seconds()
	row.ScoreS = t2.Sub(t1).Seconds()
	row.TokensPerS = rst.TokensPerSecond()
	row.TeacherForced = sum.TeacherForced
	if rem != nil {
		rep := rem.src.Report()
		row.Retries = rep.Retries
		for _, w := range rep.Workers {
			if w.Groups > 0 {
				row.Workers++
			}
		}
	}
	row.TrainSkipped = 1
	if len(recs) > 0 {
		stage("training")
		exs := Examples(recs)
		for i := range exs {
			// The rollouts were sampled with the adapter being trained:
			// the first update is on-policy and its own forward gives the
			// old log-probs (the export's are the sampler's, which differ
			// from the model's under top-k/top-p).
			exs[i].OldLogProbs = nil
		}
		sts, err := tr.Update(ctx, exs)
		if err != nil {
			return StepMetrics{}, fmt.Errorf("step %d: train: %w", step, err)
		}
		if !sts[0].Skipped {
			row.TrainSkipped = 0
			row.Updates = len(sts)
			row.Loss, row.GradNorm, row.LR = sts[0].Objective, sts[0].GradNorm, sts[0].LR
			var clip, kl float64
			for _, st := range sts {
				clip += st.ClipFrac
				kl += st.KL
			}
			row.ClipFrac, row.KL = clip/float64(len(sts)), kl/float64(len(sts))
		}
	}
	row.TrainS = time.Since(t2).Seconds()
	row.StepS = time.Since(t0).Seconds()
	return row, nil
}

// stepPrompts picks a step's prompts: the train prompts in an order shuffled
// once per pass (seeded by the seed and the pass), taken in turn. A step
// never holds a prompt twice: when a step crosses the end of a pass, a
// prompt that the next pass's order brings up again is deferred to the next
// step, in order. The draw is replayed from step 1, so a step's prompts
// depend only on the seed and the step number (resume relies on it); when
// the step size divides the prompts nothing is ever deferred.
func stepPrompts(ps []dataset.Prompt, n int, seed uint64, step int) []dataset.Prompt {
	if n <= 0 || n > len(ps) {
		n = len(ps)
	}
	pass, pos := 0, 0
	perm := passOrder(len(ps), seed, pass)
	var deferred, picked []int
	for s := 1; s <= step; s++ {
		queue := deferred
		deferred, picked = nil, picked[:0]
		in := make(map[int]bool, n)
		for len(picked) < n {
			var k int
			if len(queue) > 0 {
				k, queue = queue[0], queue[1:]
			} else {
				if pos == len(ps) {
					pass, pos = pass+1, 0
					perm = passOrder(len(ps), seed, pass)
				}
				k, pos = perm[pos], pos+1
			}
			if in[k] {
				deferred = append(deferred, k)
				continue
			}
			in[k] = true
			picked = append(picked, k)
		}
		deferred = append(queue, deferred...)
	}
	out := make([]dataset.Prompt, len(picked))
	for i, k := range picked {
		out[i] = ps[k]
	}
	return out
}

// passOrder is the shuffled order of one pass over n prompts.
func passOrder(n int, seed uint64, pass int) []int {
	return rand.New(rand.NewPCG(seed, uint64(pass)+0x9e3779b9)).Perm(n)
}

// readPrompts reads a prompt file and refuses one whose ids repeat: scoring
// groups completions by prompt id, so two prompts with one id would merge
// into one group.
func readPrompts(path, fieldMap string) ([]dataset.Prompt, error) {
	if path == "" {
		return nil, errors.New("no training prompts given ([data] train)")
	}
	pf, err := ReadPromptFile(path, fieldMap, false)
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
			if err := WriteFileAtomic(cfgPath, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
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
	if err := WriteFileAtomic(cfgPath, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return nil, err
	}
	crashPoint("run-folder-created")
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
	if err := WriteFileAtomic(filepath.Join(tmp, "optimizer.bin"), func(w io.Writer) error { _, err := w.Write(opt); return err }); err != nil {
		return err
	}
	crashPoint("checkpoint-files")
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	crashPoint("checkpoint-renamed")
	var prev Checkpoint
	if b, err := os.ReadFile(filepath.Join(dir, CheckpointFile)); err == nil {
		// A record that does not parse names no folder to remove: the
		// sweep of checkpoints/ below removes it anyway.
		if err := json.Unmarshal(b, &prev); err != nil {
			prev = Checkpoint{}
		}
	}
	ck := Checkpoint{Step: step, Dir: name, Adapter: "adapter.gguf", Optimizer: "optimizer.bin", Time: time.Now().UTC().Format(time.RFC3339)}
	b, err := json.MarshalIndent(ck, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint record: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, CheckpointFile), func(w io.Writer) error { _, err := w.Write(append(b, '\n')); return err }); err != nil {
		return err
	}
	crashPoint("checkpoint-recorded")
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
