package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
	"github.com/confclip/confclip/shard"
)

// EngineOptions is the [rollout] table (the engine's own options) with
// the [model] keys the engine reads: the chat template, the context and
// the threads. A top_p of 0, which Validate refuses in a file, keeps only
// the most likely token, as in llama.cpp (the sampler's own 0 means off).
func EngineOptions(cfg Config) rollout.Options {
	o := cfg.Rollout
	o.ChatTemplate, o.SeqCtx, o.Threads = cfg.Model.ChatTemplate, cfg.Model.Ctx, cfg.Model.Threads
	if o.TopP == 0 {
		o.TopP, o.TopK = 1, 1
	}
	return o
}

// GreedyOptions are the engine options of a greedy evaluation: one
// completion per prompt at temperature 0, with the run's length limit and
// stop strings.
func GreedyOptions(cfg Config) rollout.Options {
	o := EngineOptions(cfg)
	o.Group = 1
	o.Params = sampler.Params{Temperature: 0}
	o.Parallel = max(cfg.Rollout.Parallel, 16)
	return o
}

// EvalOptions say what Evaluate measures.
type EvalOptions struct {
	Config Config // [rollout] max_tokens, stop, chat, temperature...; [verifier]; [confidence]
	Data   string // prompts with reference answers (JSONL)
	// Samples K > 1 also samples K completions per prompt (with the rollout
	// settings) for pass@K.
	Samples int
	// Dir receives the generated and scored records; "" uses a temporary
	// folder, removed afterwards.
	Dir string
	// Shard, when set, evaluates only the prompts of one shard (package shard);
	// merge.Eval joins the shards' results.
	Shard shard.Shard
	// Progress, when set, receives EvalProgress events.
	Progress func(Event)
}

// EvalCase is one prompt's outcome (one JUnit test case).
type EvalCase struct {
	ID        string `json:"id"`
	Line      int    `json:"line"` // in the prompt file
	Answer    string `json:"answer"`
	Correct   bool   `json:"correct"`
	Extracted string `json:"extracted"`
	Text      string `json:"text"`   // the greedy completion
	Tokens    int    `json:"tokens"` // its length
	Reason    string `json:"reason"` // the verifier's reason
	// Error says why the prompt could not be generated; such a prompt
	// counts as wrong.
	Error string `json:"error"`
	// Confidence is the greedy completion's; SampledCorrect counts the
	// right ones of the K samples. With them merge.Eval recomputes the
	// calibration, sampled accuracy and pass@K of shards exactly.
	Confidence     float64 `json:"confidence"`
	SampledCorrect int     `json:"sampled_correct"`
}

// EvalResult is what an evaluation measured. Every field is always present
// in its JSON; a metric that is undefined (calibration of a set whose
// completions are all right or all wrong, pass@K without --samples) is null.
type EvalResult struct {
	Data string `json:"data"`
	// Shard is "K/N" for one shard's result (EvalOptions.Shard).
	Shard   string `json:"shard"` // "" unless sharded (always present: the JSON has one shape)
	Prompts int    `json:"prompts"`
	Correct int    `json:"correct"`
	// Accuracy is Correct / Prompts with greedy completions (one per prompt,
	// temperature 0); a prompt that could not be generated counts as wrong.
	Accuracy   float64 `json:"accuracy"`
	Failed     int     `json:"failed"`      // prompts that could not be generated
	MeanTokens float64 `json:"mean_tokens"` // over the greedy completions (0 when none)
	// Samples (K), SampledAccuracy and PassAtK describe K sampled
	// completions per prompt, when asked for.
	Samples         int      `json:"samples"`
	SampledAccuracy *float64 `json:"sampled_accuracy"`
	PassAtK         *float64 `json:"pass_at_k"`
	// Calibration of the model's confidence (the [confidence] estimator)
	// against correctness, greedy completions.
	ECE   *float64 `json:"ece"`
	Brier *float64 `json:"brier"`
	AUROC *float64 `json:"auroc"`
	// Stated counts the greedy completions that state a confidence in a
	// <confidence>q</confidence> tag (RLCR's format); StatedECE and
	// StatedBrier are the calibration of those stated confidences against
	// correctness (null when none states one).
	Stated      int        `json:"stated"`
	StatedECE   *float64   `json:"stated_ece"`
	StatedBrier *float64   `json:"stated_brier"`
	Seconds     float64    `json:"seconds"`
	Cases       []EvalCase `json:"cases"`
}

// Evaluate generates a greedy completion for every prompt of o.Data with the
// model (and, with o.Samples > 1, K sampled ones each), verifies them with
// the config's verifier and measures accuracy, pass@K and calibration.
func Evaluate(ctx context.Context, m *Model, o EvalOptions) (EvalResult, error) {
	pf, err := dataset.ReadPromptFile(o.Data, o.Config.Data.Map, false)
	if err != nil {
		return EvalResult{Data: o.Data}, err
	}
	prompts, lines := pf.Prompts, pf.Lines
	if len(prompts) == 0 {
		return EvalResult{Data: o.Data}, fmt.Errorf("%s: no prompts", o.Data)
	}
	if o.Shard.Enabled() {
		if err := o.Shard.Check(); err != nil {
			return EvalResult{Data: o.Data}, err
		}
		var sp []dataset.Prompt
		var sl []int
		for i, p := range prompts {
			if o.Shard.Has(p.ID) {
				sp, sl = append(sp, p), append(sl, lines[i])
			}
		}
		if len(sp) == 0 { // a shard may hold no prompt
			res := EvalResult{Data: o.Data, Shard: o.Shard.String(), Cases: []EvalCase{}}
			if o.Samples > 1 {
				res.Samples = o.Samples
			}
			return res, nil
		}
		prompts, lines = sp, sl
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "confclip-eval-"); err != nil {
			return EvalResult{Data: o.Data}, err
		}
		defer os.RemoveAll(dir)
	}
	greedy, err := m.engine(GreedyOptions(o.Config))
	if err != nil {
		return EvalResult{Data: o.Data}, err
	}
	defer m.release(greedy)
	var sampled *rollout.Engine
	if o.Samples > 1 {
		eo := EngineOptions(o.Config)
		eo.Group = o.Samples
		if sampled, err = m.engine(eo); err != nil {
			return EvalResult{Data: o.Data}, err
		}
		defer m.release(sampled)
	}
	res, err := evaluate(ctx, o.Config, greedy, sampled, promptFile{o.Data, prompts, lines}, dir, evalProgress(o.Progress, 0, 0))
	res.Shard = o.Shard.String()
	return res, err
}

// promptFile is a prompt file's records with their line numbers.
type promptFile struct {
	path    string
	prompts []dataset.Prompt
	lines   []int
}

// evaluateEngines is Evaluate with engines the caller made (the run loop
// keeps its own, with the adapter it trains); progress gets the run's step's
// EvalProgress events.
func evaluateEngines(ctx context.Context, cfg Config, greedy *rollout.Engine, path string, prompts []dataset.Prompt, dir string, progress func(Event), step, steps int) (EvalResult, error) {
	lines := make([]int, len(prompts))
	for i := range lines {
		lines[i] = i + 1
	}
	return evaluate(ctx, cfg, greedy, nil, promptFile{path, prompts, lines}, dir, evalProgress(progress, step, steps))
}

// evalProgress makes the per-phase group callback that sends EvalProgress
// events of a run's step (steps 0: not in a run) to f; nil when f is.
func evalProgress(f func(Event), step, steps int) func(phase string, groups, total int, elapsed time.Duration) {
	if f == nil {
		return nil
	}
	return func(phase string, groups, total int, elapsed time.Duration) {
		f(EvalProgress{Step: step, Steps: steps, Phase: phase, Groups: groups, Total: total, Elapsed: elapsed})
	}
}

func evaluate(ctx context.Context, cfg Config, greedy, sampled *rollout.Engine, pf promptFile, dir string,
	progress func(phase string, groups, total int, elapsed time.Duration)) (EvalResult, error) {
	start := time.Now()
	res := EvalResult{Data: pf.path, Prompts: len(pf.prompts), Cases: make([]EvalCase, len(pf.prompts))}
	byID := map[string]int{}
	for i, p := range pf.prompts {
		res.Cases[i] = EvalCase{ID: p.ID, Line: pf.lines[i], Answer: p.Answer}
		if _, dup := byID[p.ID]; !dup {
			byID[p.ID] = i
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	recs, failed, err := generateAndScore(ctx, cfg, greedy, pf, filepath.Join(dir, "greedy"), phaseProgress(progress, "greedy"))
	if err != nil {
		return res, err
	}
	for i, msg := range failed {
		res.Cases[i].Error = msg
	}
	var order []int // the cases in the order of their records, for the calibration's sums
	for _, r := range recs {
		i, ok := byID[r.PromptID]
		if !ok || res.Cases[i].Error != "" {
			continue
		}
		c := &res.Cases[i]
		c.Correct, c.Extracted, c.Reason = r.VerifierResult.Correct, r.VerifierResult.Extracted, r.VerifierResult.Reason
		c.Text, c.Tokens, c.Confidence = r.Text, len(r.Tokens), r.Confidence
		order = append(order, i)
	}
	if sampled != nil {
		srecs, _, err := generateAndScore(ctx, cfg, sampled, pf, filepath.Join(dir, "sampled"), phaseProgress(progress, "sampled"))
		if err != nil {
			return res, err
		}
		res.Samples = sampled.Options().Group
		for _, r := range srecs {
			if i, ok := byID[r.PromptID]; ok && r.VerifierResult.Correct {
				res.Cases[i].SampledCorrect++
			}
		}
	}
	res.setStats(order)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// SetStats computes the result's counts and statistics from its cases:
// failed and correct prompts, accuracy, the mean length and calibration of
// the generated completions, and with samples the sampled accuracy and
// pass@K. Evaluate builds its result this way, and merging shards rebuilds
// the whole's from the cases.
func (res *EvalResult) SetStats() { res.setStats(nil) }

// setStats is SetStats with the calibration summed over the generated
// cases in the given order (nil: the cases' order), so that Evaluate's
// sums run in the order of its records, as they always have.
func (res *EvalResult) setStats(order []int) {
	res.Prompts = len(res.Cases)
	res.Failed, res.Correct = 0, 0
	tokens, sampledRight, passed := 0, 0, 0
	for _, c := range res.Cases {
		switch {
		case c.Error != "":
			res.Failed++
			continue
		case c.Correct:
			res.Correct++
		}
		tokens += c.Tokens
		sampledRight += c.SampledCorrect
		if c.SampledCorrect > 0 {
			passed++
		}
	}
	if order == nil {
		for i, c := range res.Cases {
			if c.Error == "" {
				order = append(order, i)
			}
		}
	}
	var conf, stated []float64
	var correct, statedCorrect []bool
	for _, i := range order {
		conf = append(conf, res.Cases[i].Confidence)
		correct = append(correct, res.Cases[i].Correct)
		if q, ok := confclip.StatedConfidence(res.Cases[i].Text); ok {
			stated = append(stated, q)
			statedCorrect = append(statedCorrect, res.Cases[i].Correct)
		}
	}
	res.StatedECE, res.StatedBrier = nil, nil
	if res.Stated = len(stated); res.Stated > 0 {
		cal := confclip.Calibrate(stated, statedCorrect)
		res.StatedECE, res.StatedBrier = ptr(cal.ECE), ptr(cal.Brier)
	}
	if res.Prompts > 0 {
		res.Accuracy = float64(res.Correct) / float64(res.Prompts)
	}
	if n := len(conf); n > 0 {
		res.MeanTokens = float64(tokens) / float64(n)
		cal := confclip.Calibrate(conf, correct)
		res.ECE, res.Brier = ptr(cal.ECE), ptr(cal.Brier)
		if cal.AUROCDefined {
			res.AUROC = ptr(cal.AUROC)
		}
	}
	if res.Samples > 1 && res.Prompts > 0 {
		res.SampledAccuracy = ptr(float64(sampledRight) / float64(res.Samples*res.Prompts))
		res.PassAtK = ptr(float64(passed) / float64(res.Prompts))
	}
}

func ptr(x float64) *float64 { return &x }

// phaseProgress binds a phase name to an evaluation's progress callback.
func phaseProgress(f func(phase string, groups, total int, elapsed time.Duration), phase string) func(groups, total int, elapsed time.Duration) {
	if f == nil {
		return nil
	}
	return func(groups, total int, elapsed time.Duration) { f(phase, groups, total, elapsed) }
}

// generateAndScore writes prefix.rollouts.jsonl and prefix.scored.jsonl and
// returns the scored records (binary reward: an evaluation has no use for
// advantages) and, by index into the prompts, why those that could not be
// generated failed. Errors name the prompt file's lines, not the files under
// prefix.
func generateAndScore(ctx context.Context, cfg Config, e *rollout.Engine, pf promptFile, prefix string,
	progress func(groups, total int, elapsed time.Duration)) ([]dataset.Scored, map[int]string, error) {
	rolls := prefix + ".rollouts.jsonl"
	st, ids, err := writeRollouts(ctx, e, pf.prompts, rolls, progress)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", pf.path, err)
	}
	failed := map[int]string{}
	for _, re := range st.Errors {
		if re.Index >= 0 && re.Index < len(pf.prompts) {
			failed[re.Index] = re.Reason
		}
	}
	if st.Records == 0 {
		return nil, failed, nil
	}
	so := NewScoreOptions(cfg, rolls, prefix+".scored.jsonl")
	so.Reward.Method = "binary"
	so.Reward.FormatWeight = 0
	so.Reward.Overlong = false
	so.Advantage.Estimator = "none"
	so.Advantage.Scale = "" // no advantages, nothing to scale
	so.Advantage.MaskTruncated = false
	if _, err := Score(ctx, so); err != nil {
		// Say the user's prompt and line, not the generated file's.
		var le *dataset.LineError
		if errors.As(err, &le) && le.File == rolls && le.Line >= 1 && le.Line <= len(ids) {
			for i, p := range pf.prompts {
				if p.ID == ids[le.Line-1] {
					return nil, nil, fmt.Errorf("%s:%d: id %q: %w", pf.path, pf.lines[i], p.ID, le.Err)
				}
			}
		}
		return nil, nil, fmt.Errorf("%s: %w", pf.path, err)
	}
	recs, _, _, err := dataset.ReadFile[dataset.Scored](prefix+".scored.jsonl", false)
	return recs, failed, err
}

func firstErrors(errs []rollout.RecordError) []string {
	var out []string
	for i, e := range errs {
		if i == 3 {
			out = append(out, "...")
			break
		}
		out = append(out, e.Error())
	}
	return out
}

// writeRollouts generates with the engine into a JSONL file (atomically)
// and returns, line by line, the prompt id of each record written.
// progress, when set, is told the groups written (of the prompts) after each
// group.
func writeRollouts(ctx context.Context, e *rollout.Engine, prompts []dataset.Prompt, path string, progress func(groups, total int, elapsed time.Duration)) (rollout.Stats, []string, error) {
	w, err := dataset.Create(path)
	if err != nil {
		return rollout.Stats{}, nil, err
	}
	var ids []string
	start, groups := time.Now(), 0
	st, err := e.Generate(ctx, prompts, func(group []dataset.Rollout) error {
		for i := range group {
			if err := w.Write(&group[i]); err != nil {
				return err
			}
			ids = append(ids, group[i].PromptID)
		}
		if groups++; progress != nil {
			progress(groups, len(prompts), time.Since(start))
		}
		return nil
	})
	if err != nil {
		w.Abort()
		return st, ids, err
	}
	if progress != nil && groups < len(prompts) { // the rest were refused
		progress(len(prompts), len(prompts), time.Since(start))
	}
	return st, ids, w.Commit()
}
