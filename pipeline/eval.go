package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/sampler"
)

// EngineOptions maps the [rollout] and [model] tables onto the rollout
// engine's options.
func EngineOptions(cfg Config) rollout.Options {
	r := cfg.Rollout
	return rollout.Options{
		Group: r.Group, MaxTokens: r.MaxTokens, Seed: r.Seed, Parallel: r.Parallel, Stop: r.Stop, Chat: r.Chat,
		Sampling: sampler.Params{Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, MinP: r.MinP},
		SeqCtx:   cfg.Model.Ctx, Threads: cfg.Model.Threads,
	}
}

// GreedyOptions are the engine options of a greedy evaluation: one
// completion per prompt at temperature 0, with the run's length limit and
// stop strings.
func GreedyOptions(cfg Config) rollout.Options {
	o := EngineOptions(cfg)
	o.Group = 1
	o.Sampling = sampler.Params{Temperature: 0}
	o.Parallel = max(cfg.Rollout.Parallel, 16)
	return o
}

// EvalResult is what an evaluation measured.
type EvalResult struct {
	Prompts int `json:"prompts"`
	// Accuracy is the greedy accuracy (one completion per prompt,
	// temperature 0).
	Accuracy   float64 `json:"accuracy"`
	MeanTokens float64 `json:"mean_tokens"`
	// Samples, SampledAccuracy and PassAtK describe K sampled completions
	// per prompt (with the rollout settings), when asked for.
	Samples         int     `json:"samples,omitempty"`
	SampledAccuracy float64 `json:"sampled_accuracy,omitempty"`
	PassAtK         float64 `json:"pass_at_k,omitempty"`
	// Calibration of the model's confidence (geo_mean over the completion
	// unless configured otherwise) against correctness, greedy completions.
	ECE     float64 `json:"ece"`
	Brier   float64 `json:"brier"`
	AUROC   float64 `json:"auroc"`
	Errors  int     `json:"errors"` // prompts that could not be generated (too long, empty)
	Seconds float64 `json:"seconds"`
}

// Evaluate generates completions for the prompts with the engine (greedy
// for Accuracy) and, when sampled is not nil, K sampled completions each for
// pass@K; it verifies them with the config's verifier. Records and scores
// are written under dir.
func Evaluate(ctx context.Context, cfg Config, greedy, sampled *rollout.Engine, prompts []dataset.Prompt, dir string) (EvalResult, error) {
	start := time.Now()
	res := EvalResult{Prompts: len(prompts)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	sum, errs, err := generateAndScore(ctx, cfg, greedy, prompts, filepath.Join(dir, "greedy"))
	if err != nil {
		return res, err
	}
	res.Errors = errs
	o := sum.Outcomes
	res.Accuracy = o.Accuracy
	res.MeanTokens = meanTokens(o.Correct, o.Completions, o.MeanTokensRight, o.MeanTokensWrong)
	if c := sum.Calibration; c != nil {
		res.ECE, res.Brier, res.AUROC = c.ECE, c.Brier, c.AUROC
	}
	if sampled != nil {
		ssum, _, err := generateAndScore(ctx, cfg, sampled, prompts, filepath.Join(dir, "sampled"))
		if err != nil {
			return res, err
		}
		res.Samples = sampled.Options().Group
		res.SampledAccuracy = ssum.Outcomes.Accuracy
		res.PassAtK = ssum.Outcomes.PassAtG
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

func meanTokens(right, all int, meanRight, meanWrong float64) float64 {
	if all == 0 {
		return 0
	}
	wrong := all - right
	s := 0.0
	if right > 0 {
		s += float64(right) * meanRight
	}
	if wrong > 0 {
		s += float64(wrong) * meanWrong
	}
	return s / float64(all)
}

// generateAndScore writes prefix.rollouts.jsonl and prefix.scored.jsonl and
// returns the scoring summary (binary reward: an evaluation has no use for
// advantages) and the number of prompts that failed to generate.
func generateAndScore(ctx context.Context, cfg Config, e *rollout.Engine, prompts []dataset.Prompt, prefix string) (Summary, int, error) {
	rolls := prefix + ".rollouts.jsonl"
	st, err := writeRollouts(ctx, e, prompts, rolls)
	if err != nil {
		return Summary{}, 0, err
	}
	if st.Records == 0 {
		return Summary{}, len(st.Errors), fmt.Errorf("no completions generated (%d prompts failed: %v)", len(st.Errors), firstErrors(st.Errors))
	}
	so := NewScoreOptions(cfg, rolls, prefix+".scored.jsonl")
	so.Reward.Method = "binary"
	so.Reward.FormatWeight = 0
	so.Reward.Overlong = false
	so.Advantage.Estimator = "none"
	so.Advantage.MaskTruncated = false
	sum, err := Score(ctx, so)
	return sum, len(st.Errors), err
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

// writeRollouts generates with the engine into a JSONL file (atomically).
func writeRollouts(ctx context.Context, e *rollout.Engine, prompts []dataset.Prompt, path string) (rollout.Stats, error) {
	w, err := dataset.Create(path)
	if err != nil {
		return rollout.Stats{}, err
	}
	st, err := e.Generate(ctx, prompts, func(group []dataset.Rollout) error {
		for i := range group {
			if err := w.Write(&group[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		w.Abort()
		return st, err
	}
	return st, w.Commit()
}
