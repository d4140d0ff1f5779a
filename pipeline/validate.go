package pipeline

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/train"
	"github.com/confclip/confclip/verifiers"
)

// maxLoraRank bounds train.lora_rank: a rank beyond the model's widths
// adds nothing and a huge one exhausts memory before any error.
const maxLoraRank = 1024

// maxGroup bounds rollout.group and rollout.parallel, and MaxJobs the
// verifications run at once: each completion in flight holds a sequence's
// state, each job a goroutine and a checker, and a million of either
// exhausts memory before any error.
const (
	maxGroup = 4096
	MaxJobs  = 1024
)

// ValidateTables is Validate limited to the keys of the named tables: a
// command checks the tables it uses, and a Go caller's zero tables it does
// not use are no error.
func (c Config) ValidateTables(tables ...string) error {
	err := c.Validate()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return err
	}
	var keep []error
	for _, e := range joined.Unwrap() {
		for _, t := range tables {
			if strings.HasPrefix(e.Error(), t+".") || strings.HasPrefix(e.Error(), t+":") {
				keep = append(keep, e)
				break
			}
		}
	}
	return errors.Join(keep...)
}

// Validate checks every key of the configuration against its range and
// every name against its registry, before anything is created on disk or
// loaded. All problems are reported together, one per line, each naming
// its key; an unknown name suggests the nearest known one. Presence checks
// that only some commands need (a model, a run folder) are left to them.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	finite := func(key string, v float64) bool {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			bad(key, "%v is not a finite number", v)
			return false
		}
		return true
	}
	atLeast := func(key string, v, lo int, what string) {
		if v < lo {
			bad(key, "%d: %s", v, what)
		}
	}
	atMost := func(key string, v, hi int) {
		if v > hi {
			bad(key, "%d: at most %d (more would exhaust memory before any result)", v, hi)
		}
	}
	inRange := func(key string, v, lo, hi float64, what string) {
		if finite(key, v) && (v < lo || v > hi) {
			bad(key, "%v: %s", v, what)
		}
	}
	name := func(key, v string, known []string) {
		if !slices.Contains(known, v) {
			bad(key, "unknown name %q%s (known: %s)", v, didYouMean(v, known), strings.Join(known, ", "))
		}
	}
	pattern := func(key, v string) {
		if v == "" {
			return
		}
		if _, err := regexp.Compile(v); err != nil {
			bad(key, "%v", err)
		}
	}

	m := c.Model
	atLeast("model.gpu_layers", m.GPULayers, -1, "want -1 (all), 0 (none) or a number of layers")
	atLeast("model.threads", m.Threads, 0, "want 0 (every core) or a number of threads")
	atLeast("model.ctx", m.Ctx, 1, "want a context size of at least 1 token")

	if _, err := dataset.ParseFieldMap(c.Data.Map); err != nil {
		bad("data.map", "%v", err)
	}

	r := c.Rollout
	atLeast("rollout.group", r.Group, 1, "want at least 1 completion per prompt")
	atMost("rollout.group", r.Group, maxGroup)
	atMost("rollout.parallel", r.Parallel, maxGroup)
	atLeast("rollout.max_tokens", r.MaxTokens, 0, "want a completion length limit of at least 1 token, or 0 for the context left after the prompt")
	inRange("rollout.temperature", r.Temperature, 0, math.MaxFloat64, "want 0 (greedy) or more")
	if finite("rollout.top_p", r.TopP) && (r.TopP <= 0 || r.TopP > 1) {
		bad("rollout.top_p", "%v: want a value in (0, 1]", r.TopP)
	}
	atLeast("rollout.top_k", r.TopK, 0, "want 0 (off) or more")
	inRange("rollout.min_p", r.MinP, 0, 1, "want a value in [0, 1]")
	atLeast("rollout.parallel", r.Parallel, 0, "want 0 (automatic) or more")
	if m.Ctx > 0 && r.MaxTokens >= m.Ctx {
		bad("rollout.max_tokens", "%d: does not fit in model.ctx = %d with a prompt", r.MaxTokens, m.Ctx)
	}

	v := c.Verifier
	name("verifier.name", v.Name, verifiers.Names())
	atLeast("verifier.timeout_ms", v.TimeoutMS, 1, "want a time limit of at least 1 ms")
	atLeast("verifier.max_bytes", v.MaxBytes, 1, "want at least 1 byte")
	atLeast("verifier.memory_mb", v.MemoryMB, 0, "want 0 (no limit) or a number of MiB")
	atLeast("verifier.cpu_seconds", v.CPUSeconds, 0, "want 0 (no limit) or a number of seconds")
	inRange("verifier.rel_tol", v.RelTol, 0, 1, "want a relative tolerance in [0, 1]")
	if slices.Contains(verifiers.Names(), v.Name) {
		// Building the verifier checks the rest of its table: extractors,
		// the format pattern, that a command's checker exists.
		if _, err := verifiers.New(v.Name, VerifierOptions(v)); err != nil {
			bad("verifier", "%v", err)
		}
	}

	cf := c.Confidence
	name("confidence.estimator", cf.Estimator, confclip.ConfidenceNames())
	name("confidence.scope", cf.Scope, confclip.ScopeNames())
	atLeast("confidence.vocab", cf.Vocab, 0, "want 0 (not needed) or the vocabulary size")

	rw := c.Reward
	name("reward.method", rw.Method, confclip.RewardNames())
	name("reward.weight", rw.Weight, confclip.WeightNames())
	inRange("reward.lo", rw.Lo, 0, 1, "want a clip in [0, 1]")
	inRange("reward.hi", rw.Hi, 0, 1, "want a clip in [0, 1]")
	if rw.Lo > rw.Hi {
		bad("reward.lo", "%v is above reward.hi = %v", rw.Lo, rw.Hi)
	}
	inRange("reward.eps", rw.Eps, 0, 1, "want a half-width in [0, 1]")
	inRange("reward.lambda", rw.Lambda, 0, math.MaxFloat64, "want 0 or more")
	inRange("reward.format_weight", rw.FormatWeight, 0, math.MaxFloat64, "want 0 (off) or more")
	pattern("reward.format_pattern", rw.FormatPattern)
	if rw.Overlong {
		atLeast("reward.max_len", rw.MaxLen, 1, "overlong needs the length at which the punishment is full")
		atLeast("reward.cache_len", rw.CacheLen, 0, "want 0 or more tokens")
		if rw.CacheLen > rw.MaxLen {
			bad("reward.cache_len", "%d is longer than reward.max_len = %d", rw.CacheLen, rw.MaxLen)
		}
	}

	a := c.Advantage
	name("advantage.estimator", a.Estimator, confclip.AdvantageNames())
	name("advantage.scale", a.Scale, confclip.ScaleNames())

	t := c.Train
	if t.LoraRank < 1 || t.LoraRank > maxLoraRank {
		bad("train.lora_rank", "%d: want a rank from 1 to %d", t.LoraRank, maxLoraRank)
	}
	if finite("train.lora_alpha", t.LoraAlpha) && t.LoraAlpha <= 0 {
		bad("train.lora_alpha", "%v: want a positive scale", t.LoraAlpha)
	}
	if len(t.Targets) == 0 {
		bad("train.targets", "empty: name the matrices to adapt (%s)", strings.Join(train.Targets, ", "))
	}
	for _, tg := range t.Targets {
		name("train.targets", tg, train.Targets)
	}
	if finite("train.lr", t.LR) && t.LR <= 0 {
		bad("train.lr", "%v: want a positive learning rate", t.LR)
	}
	inRange("train.beta1", t.Beta1, 0, math.Nextafter(1, 0), "want a decay in [0, 1)")
	inRange("train.beta2", t.Beta2, 0, math.Nextafter(1, 0), "want a decay in [0, 1)")
	if finite("train.eps", t.Eps) && t.Eps <= 0 {
		bad("train.eps", "%v: want a positive epsilon", t.Eps)
	}
	inRange("train.weight_decay", t.WeightDecay, 0, math.MaxFloat64, "want 0 or more")
	inRange("train.grad_clip", t.GradClip, 0, math.MaxFloat64, "want 0 (off) or a positive norm")
	if _, err := train.LossAgg(t.LossAgg); err != nil {
		bad("train.loss_agg", "%v", err)
	}
	atLeast("train.iterations", t.Iterations, 1, "want at least 1 update per batch")
	inRange("train.epsilon", t.Epsilon, 0, math.MaxFloat64, "want 0 or more")
	inRange("train.epsilon_high", t.EpsilonHigh, 0, math.MaxFloat64, "want 0 (= epsilon) or more")
	inRange("train.beta", t.Beta, 0, math.MaxFloat64, "want 0 (off) or more")
	if _, err := train.ScheduledLR(t.Schedule, 1, 1, 0, 1); err != nil {
		bad("train.schedule", "%v", err)
	}
	atLeast("train.warmup_steps", t.WarmupSteps, 0, "want 0 or more updates")
	atLeast("train.micro_batch", t.MicroBatch, 0, "want 0 (sized from the model) or a number of tokens per pass")

	rn := c.Run
	atLeast("run.steps", rn.Steps, 1, "want at least 1 step")
	atLeast("run.prompts_per_step", rn.PromptsPerStep, 1, "want at least 1 prompt per step")
	atLeast("run.eval_every", rn.EvalEvery, 0, "want 0 (never) or a number of steps")

	for _, arm := range c.Experiment.Arms {
		if _, err := ArmByName(arm); err != nil {
			bad("experiment.arms", "%v", err)
		}
	}
	if err := CheckStarts(c.Experiment); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// didYouMean suggests the known name nearest to v (at most a third of its
// letters off), as ", did you mean \"x\"?", or "".
func didYouMean(v string, known []string) string {
	best, bestD := "", math.MaxInt
	for _, k := range known {
		if d := editDistance(strings.ToLower(v), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" || bestD > max(1, len(best)/3) {
		return ""
	}
	return fmt.Sprintf(", did you mean %q?", best)
}

// editDistance is the Levenshtein distance between a and b (in bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
