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
	"github.com/confclip/confclip/scoring"
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
// every name against its registry (the table checks), before anything is
// created on disk or loaded. All problems are reported together, one per
// line, each naming its key; an unknown name suggests the nearest known
// one. Presence checks that only some commands need (a model, a run
// folder) are left to them.
func (c Config) Validate() error {
	var errs []error
	for _, ck := range checks {
		err := ck.check(c)
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = append(errs, joined.Unwrap()...)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// A check is one row of Validate's table: a key, what it accepts (in words,
// for docs/config.md's table of checked values: CheckedValues), and the
// test, which returns nil or why the value is refused.
type check struct {
	key     string
	accepts func() string
	check   func(c Config) error
}

// refuse is a check's error: the key, then the problem.
func refuse(key, format string, args ...any) error {
	return fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...))
}

func text(s string) func() string { return func() string { return s } }

// notFinite refuses NaN and infinities.
func notFinite(key string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return refuse(key, "%v is not a finite number", v)
	}
	return nil
}

// atLeast accepts lo or more; what is the message ("want ...").
func atLeast(key string, v func(Config) int, lo int, what string) check {
	return check{key, text(strings.TrimPrefix(what, "want ")), func(c Config) error {
		if x := v(c); x < lo {
			return refuse(key, "%d: %s", x, what)
		}
		return nil
	}}
}

// atMost bounds what would exhaust memory before any result.
func atMost(key string, v func(Config) int, hi int) check {
	return check{key, text(fmt.Sprintf("at most %d", hi)), func(c Config) error {
		if x := v(c); x > hi {
			return refuse(key, "%d: at most %d (more would exhaust memory before any result)", x, hi)
		}
		return nil
	}}
}

// inRange accepts a finite value from lo to hi.
func inRange(key string, v func(Config) float64, lo, hi float64, what string) check {
	return check{key, text(strings.TrimPrefix(what, "want ")), func(c Config) error {
		x := v(c)
		if err := notFinite(key, x); err != nil {
			return err
		}
		if x < lo || x > hi {
			return refuse(key, "%v: %s", x, what)
		}
		return nil
	}}
}

// positive accepts a finite value above 0.
func positive(key string, v func(Config) float64, what string) check {
	return check{key, text(strings.TrimPrefix(what, "want ")), func(c Config) error {
		x := v(c)
		if err := notFinite(key, x); err != nil {
			return err
		}
		if x <= 0 {
			return refuse(key, "%v: %s", x, what)
		}
		return nil
	}}
}

// oneOf accepts the names of a registry.
func oneOf(key string, v func(Config) string, known func() []string) check {
	return check{key, func() string { return "one of " + strings.Join(known(), ", ") }, func(c Config) error {
		return knownName(key, v(c), known())
	}}
}

func knownName(key, v string, known []string) error {
	if !slices.Contains(known, v) {
		return refuse(key, "unknown name %q%s (known: %s)", v, didYouMean(v, known), strings.Join(known, ", "))
	}
	return nil
}

// wrap turns a checking function's error into a check's.
func wrap(key, accepts string, f func(c Config) error) check {
	return check{key, text(accepts), func(c Config) error {
		if err := f(c); err != nil {
			return refuse(key, "%v", err)
		}
		return nil
	}}
}

// checks is Validate's table, in the order of the keys in docs/config.md.
var checks = []check{
	atLeast("model.gpu_layers", func(c Config) int { return c.Model.GPULayers }, -1, "want -1 (all), 0 (none) or a number of layers"),
	atLeast("model.threads", func(c Config) int { return c.Model.Threads }, 0, "want 0 (every core) or a number of threads"),
	atLeast("model.ctx", func(c Config) int { return c.Model.Ctx }, 1, "want a context size of at least 1 token"),

	wrap("data.map", "a field map, as --map takes it", func(c Config) error { _, err := dataset.ParseFieldMap(c.Data.Map); return err }),

	atLeast("rollout.group", func(c Config) int { return c.Rollout.Group }, 1, "want at least 1 completion per prompt"),
	atMost("rollout.group", func(c Config) int { return c.Rollout.Group }, maxGroup),
	atMost("rollout.parallel", func(c Config) int { return c.Rollout.Parallel }, maxGroup),
	atLeast("rollout.max_tokens", func(c Config) int { return c.Rollout.MaxTokens }, 0, "want a completion length limit of at least 1 token, or 0 for the context left after the prompt"),
	inRange("rollout.temperature", func(c Config) float64 { return c.Rollout.Temperature }, 0, math.MaxFloat64, "want 0 (greedy) or more"),
	{"rollout.top_p", text("a value in (0, 1]"), func(c Config) error {
		p := c.Rollout.TopP
		if err := notFinite("rollout.top_p", p); err != nil {
			return err
		}
		if p <= 0 || p > 1 {
			return refuse("rollout.top_p", "%v: want a value in (0, 1]", p)
		}
		return nil
	}},
	atLeast("rollout.top_k", func(c Config) int { return c.Rollout.TopK }, 0, "want 0 (off) or more"),
	inRange("rollout.min_p", func(c Config) float64 { return c.Rollout.MinP }, 0, 1, "want a value in [0, 1]"),
	atLeast("rollout.parallel", func(c Config) int { return c.Rollout.Parallel }, 0, "want 0 (automatic) or more"),
	{"rollout.max_tokens", text("less than model.ctx"), func(c Config) error {
		if m, r := c.Model, c.Rollout; m.Ctx > 0 && r.MaxTokens >= m.Ctx {
			return refuse("rollout.max_tokens", "%d: does not fit in model.ctx = %d with a prompt", r.MaxTokens, m.Ctx)
		}
		return nil
	}},

	{"verifier.name", text("the name of a registered verifier (docs/verifiers.md)"), func(c Config) error {
		return knownName("verifier.name", c.Verifier.Name, verifiers.Names())
	}},
	atLeast("verifier.timeout_ms", func(c Config) int { return c.Verifier.TimeoutMS }, 1, "want a time limit of at least 1 ms"),
	atLeast("verifier.max_bytes", func(c Config) int { return c.Verifier.MaxBytes }, 1, "want at least 1 byte"),
	atLeast("verifier.memory_mb", func(c Config) int { return c.Verifier.MemoryMB }, 0, "want 0 (no limit) or a number of MiB"),
	atLeast("verifier.cpu_seconds", func(c Config) int { return c.Verifier.CPUSeconds }, 0, "want 0 (no limit) or a number of seconds"),
	inRange("verifier.rel_tol", func(c Config) float64 { return c.Verifier.RelTol }, 0, 1, "want a relative tolerance in [0, 1]"),
	// Building the verifier checks the rest of its table: extractors, the
	// format pattern, that a command's checker exists.
	wrap("verifier", "settings the named verifier builds with (extractors, pattern, command)", func(c Config) error {
		if !slices.Contains(verifiers.Names(), c.Verifier.Name) {
			return nil
		}
		_, err := verifiers.New(c.Verifier.Name, scoring.VerifierOptions(c.Verifier))
		return err
	}),

	oneOf("confidence.estimator", func(c Config) string { return c.Confidence.Estimator }, confclip.ConfidenceNames),
	oneOf("confidence.scope", func(c Config) string { return c.Confidence.Scope }, confclip.ScopeNames),
	atLeast("confidence.vocab", func(c Config) int { return c.Confidence.Vocab }, 0, "want 0 (not needed) or the vocabulary size"),

	oneOf("reward.method", func(c Config) string { return c.Reward.Method }, confclip.RewardNames),
	oneOf("reward.weight", func(c Config) string { return c.Reward.Weight }, confclip.WeightNames),
	inRange("reward.lo", func(c Config) float64 { return c.Reward.Lo }, 0, 1, "want a clip in [0, 1]"),
	inRange("reward.hi", func(c Config) float64 { return c.Reward.Hi }, 0, 1, "want a clip in [0, 1]"),
	{"reward.lo", text("at most reward.hi"), func(c Config) error {
		if rw := c.Reward; rw.Lo > rw.Hi {
			return refuse("reward.lo", "%v is above reward.hi = %v", rw.Lo, rw.Hi)
		}
		return nil
	}},
	inRange("reward.eps", func(c Config) float64 { return c.Reward.Eps }, 0, 1, "want a half-width in [0, 1]"),
	inRange("reward.lambda", func(c Config) float64 { return c.Reward.Lambda }, 0, math.MaxFloat64, "want 0 or more"),
	inRange("reward.format_weight", func(c Config) float64 { return c.Reward.FormatWeight }, 0, math.MaxFloat64, "want 0 (off) or more"),
	inRange("reward.self_certainty_weight", func(c Config) float64 { return c.Reward.SelfCertaintyWeight }, 0, math.MaxFloat64, "want 0 (off) or more"),
	wrap("reward.format_pattern", "a regular expression (Go syntax), or empty", func(c Config) error {
		if c.Reward.FormatPattern == "" {
			return nil
		}
		_, err := regexp.Compile(c.Reward.FormatPattern)
		return err
	}),
	{"reward.max_len", text("with overlong: at least 1"), func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.MaxLen < 1 {
			return refuse("reward.max_len", "%d: overlong needs the length at which the punishment is full", rw.MaxLen)
		}
		return nil
	}},
	{"reward.cache_len", text("with overlong: 0 or more tokens"), func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.CacheLen < 0 {
			return refuse("reward.cache_len", "%d: want 0 or more tokens", rw.CacheLen)
		}
		return nil
	}},
	{"reward.cache_len", text("with overlong: at most reward.max_len"), func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.CacheLen > rw.MaxLen {
			return refuse("reward.cache_len", "%d is longer than reward.max_len = %d", rw.CacheLen, rw.MaxLen)
		}
		return nil
	}},

	oneOf("advantage.estimator", func(c Config) string { return c.Advantage.Estimator }, confclip.AdvantageNames),
	oneOf("advantage.scale", func(c Config) string { return c.Advantage.Scale }, confclip.ScaleNames),
	{"advantage.scale", text("a scale other than group only with estimator grpo"), func(c Config) error {
		_, err := confclip.AdvantageFor(c.Advantage.Estimator, c.Advantage.Scale) // its error names the keys
		return err
	}},
	inRange("advantage.std_filter_beta", func(c Config) float64 { return c.Advantage.StdFilterBeta }, 0, math.MaxFloat64, "want 0 (off) or more"),
	inRange("advantage.std_filter_ema", func(c Config) float64 { return c.Advantage.StdFilterEMA }, 0, 1, "want a weight from 0 to 1"),

	{"train.lora_rank", text(fmt.Sprintf("a rank from 1 to %d", maxLoraRank)), func(c Config) error {
		if r := c.Train.LoraRank; r < 1 || r > maxLoraRank {
			return refuse("train.lora_rank", "%d: want a rank from 1 to %d", r, maxLoraRank)
		}
		return nil
	}},
	positive("train.lora_alpha", func(c Config) float64 { return c.Train.LoraAlpha }, "want a positive scale"),
	{"train.targets", func() string { return "a non-empty list of " + strings.Join(train.Targets, ", ") }, func(c Config) error {
		t := c.Train.Targets
		if len(t) == 0 {
			return refuse("train.targets", "empty: name the matrices to adapt (%s)", strings.Join(train.Targets, ", "))
		}
		var errs []error
		for _, tg := range t {
			errs = append(errs, knownName("train.targets", tg, train.Targets))
		}
		return errors.Join(errs...)
	}},
	positive("train.lr", func(c Config) float64 { return c.Train.LR }, "want a positive learning rate"),
	inRange("train.beta1", func(c Config) float64 { return c.Train.Beta1 }, 0, math.Nextafter(1, 0), "want a decay in [0, 1)"),
	inRange("train.beta2", func(c Config) float64 { return c.Train.Beta2 }, 0, math.Nextafter(1, 0), "want a decay in [0, 1)"),
	positive("train.eps", func(c Config) float64 { return c.Train.Eps }, "want a positive epsilon"),
	inRange("train.weight_decay", func(c Config) float64 { return c.Train.WeightDecay }, 0, math.MaxFloat64, "want 0 or more"),
	inRange("train.grad_clip", func(c Config) float64 { return c.Train.GradClip }, 0, math.MaxFloat64, "want 0 (off) or a positive norm"),
	wrap("train.loss_agg", "a loss aggregation train knows", func(c Config) error { _, err := train.LossAgg(c.Train.LossAgg); return err }),
	atLeast("train.iterations", func(c Config) int { return c.Train.Iterations }, 1, "want at least 1 update per batch"),
	inRange("train.epsilon", func(c Config) float64 { return c.Train.Epsilon }, 0, math.MaxFloat64, "want 0 or more"),
	inRange("train.epsilon_high", func(c Config) float64 { return c.Train.EpsilonHigh }, 0, math.MaxFloat64, "want 0 (= epsilon) or more"),
	inRange("train.beta", func(c Config) float64 { return c.Train.Beta }, 0, math.MaxFloat64, "want 0 (off) or more"),
	inRange("train.temperature", func(c Config) float64 { return c.Train.Temperature }, math.SmallestNonzeroFloat64, math.MaxFloat64, "want a positive number (1 = the model's own distribution; the rollout's temperature trains as TRL and verl do)"),
	inRange("train.entropy_coef", func(c Config) float64 { return c.Train.EntropyCoef }, -math.MaxFloat64, math.MaxFloat64, "want a finite number (0 = off; > 0 a bonus, < 0 a penalty)"),
	wrap("train.schedule", "a learning-rate schedule train knows", func(c Config) error {
		_, err := train.ScheduledLR(c.Train.Schedule, 1, 1, 0, 1)
		return err
	}),
	atLeast("train.warmup_steps", func(c Config) int { return c.Train.WarmupSteps }, 0, "want 0 or more updates"),
	atLeast("train.micro_batch", func(c Config) int { return c.Train.MicroBatch }, 0, "want 0 (sized from train.memory) or a number of tokens per pass"),
	wrap("train.memory", `a size with a unit ("2GiB", "512MiB"), or "" for a quarter of the free memory`, func(c Config) error {
		_, err := train.ParseBytes(c.Train.Memory)
		return err
	}),

	atLeast("run.steps", func(c Config) int { return c.Run.Steps }, 1, "want at least 1 step"),
	atLeast("run.prompts_per_step", func(c Config) int { return c.Run.PromptsPerStep }, 1, "want at least 1 prompt per step"),
	atLeast("run.eval_every", func(c Config) int { return c.Run.EvalEvery }, 0, "want 0 (never) or a number of steps"),

	{"experiment.arms", func() string {
		var names []string
		for _, a := range Arms {
			names = append(names, a.Name)
		}
		return "arms of " + strings.Join(names, ", ")
	}, func(c Config) error {
		var errs []error
		for _, arm := range c.Experiment.Arms {
			if _, err := ArmByName(arm); err != nil {
				errs = append(errs, refuse("experiment.arms", "%v", err))
			}
		}
		return errors.Join(errs...)
	}},
	{"experiment.starts", text("distinct names; with a seed, experiment.corpus and pre-training settings of at least 1 step, 1 text, a positive rate"), func(c Config) error {
		return CheckStarts(c.Experiment)
	}},
}

// Accepts is what Validate accepts for a key, in words ("" when it does
// not check the key): the commands' help shows it beside a config flag.
func Accepts(key string) string {
	var out []string
	for _, ck := range checks {
		if ck.key == key {
			out = append(out, ck.accepts())
		}
	}
	return strings.Join(out, "; ")
}

// CheckedValues is Validate's table as Markdown, one row per key with what
// it accepts: docs/config.md holds it (a test keeps the two the same).
func CheckedValues() string {
	var b strings.Builder
	b.WriteString("| key | accepts |\n|---|---|\n")
	var keys []string
	accepts := map[string][]string{}
	for _, ck := range checks {
		if _, seen := accepts[ck.key]; !seen {
			keys = append(keys, ck.key)
		}
		accepts[ck.key] = append(accepts[ck.key], ck.accepts())
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | %s |\n", k, strings.Join(accepts[k], "; "))
	}
	return b.String()
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
