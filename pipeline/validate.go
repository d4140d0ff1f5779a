package pipeline

import (
	"errors"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/confclip/confclip/confclip"
	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/train"
	"github.com/confclip/confclip/verifiers"
)

// MaxJobs bounds the verifications run at once: each job holds a
// goroutine and a checker, and a million of them exhausts memory before
// any error (rollout.MaxGroup bounds the completions in flight).
const MaxJobs = 1024

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
func (c Config) Validate() error { return settings.Run(c, checks) }

// A check is one row of Validate's table: a key, what it accepts (in words,
// for docs/config.md's table of checked values: experiments.CheckedValues), and the
// test, which returns nil or why the value is refused. A table that a
// package owns brings its rows (verifiers.Checks); the rows here are
// pipeline's own tables' and those that relate keys of different tables.
type check = settings.Check[Config]

var (
	refuse    = settings.Refuse
	text      = settings.Text
	notFinite = settings.NotFinite
	knownName = settings.KnownName
	atLeast   = settings.AtLeast[Config]
	atMost    = settings.AtMost[Config]
	inRange   = settings.InRange[Config]
	positive  = settings.Positive[Config]
	oneOf     = settings.OneOf[Config]
	wrap      = settings.Wrap[Config]
)

// checks is Validate's table, in the order of the keys in docs/config.md.
var checks = slices.Concat([]check{
	atLeast("model.gpu_layers", func(c Config) int { return c.Model.GPULayers }, -1, "want -1 (all), 0 (none) or a number of layers"),
	atLeast("model.threads", func(c Config) int { return c.Model.Threads }, 0, "want 0 (every core) or a number of threads"),
	atLeast("model.ctx", func(c Config) int { return c.Model.Ctx }, 1, "want a context size of at least 1 token"),

	wrap("data.map", "a field map, as --map takes it", func(c Config) error { _, err := dataset.ParseFieldMap(c.Data.Map); return err }),

	// rollout.*: the rollout package's own rows, then how the [rollout]
	// table relates to [model].
}, settings.Lift(rollout.Checks(), func(c Config) rollout.Options { return c.Rollout }), []check{
	{Key: "rollout.max_tokens", Accepts: text("less than model.ctx"), Test: func(c Config) error {
		if m, r := c.Model, c.Rollout; m.Ctx > 0 && r.MaxTokens >= m.Ctx {
			return refuse("rollout.max_tokens", "%d: does not fit in model.ctx = %d with a prompt", r.MaxTokens, m.Ctx)
		}
		return nil
	}},

	// verifier.*: the verifiers package's own rows.
}, settings.Lift(verifiers.Checks(), func(c Config) verifiers.Config { return c.Verifier }), []check{

	oneOf("confidence.estimator", func(c Config) string { return c.Confidence.Estimator }, confclip.ConfidenceNames),
	oneOf("confidence.scope", func(c Config) string { return c.Confidence.Scope }, confclip.ScopeNames),
	atLeast("confidence.vocab", func(c Config) int { return c.Confidence.Vocab }, 0, "want 0 (not needed) or the vocabulary size"),

	oneOf("reward.method", func(c Config) string { return c.Reward.Method }, confclip.RewardNames),
	oneOf("reward.weight", func(c Config) string { return c.Reward.Weight }, confclip.WeightNames),
	inRange("reward.lo", func(c Config) float64 { return c.Reward.Lo }, 0, 1, "want a clip in [0, 1]"),
	inRange("reward.hi", func(c Config) float64 { return c.Reward.Hi }, 0, 1, "want a clip in [0, 1]"),
	{Key: "reward.lo", Accepts: text("at most reward.hi"), Test: func(c Config) error {
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
	{Key: "reward.max_len", Accepts: text("with overlong: at least 1"), Test: func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.MaxLen < 1 {
			return refuse("reward.max_len", "%d: overlong needs the length at which the punishment is full", rw.MaxLen)
		}
		return nil
	}},
	{Key: "reward.cache_len", Accepts: text("with overlong: 0 or more tokens"), Test: func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.CacheLen < 0 {
			return refuse("reward.cache_len", "%d: want 0 or more tokens", rw.CacheLen)
		}
		return nil
	}},
	{Key: "reward.cache_len", Accepts: text("with overlong: at most reward.max_len"), Test: func(c Config) error {
		if rw := c.Reward; rw.Overlong && rw.CacheLen > rw.MaxLen {
			return refuse("reward.cache_len", "%d is longer than reward.max_len = %d", rw.CacheLen, rw.MaxLen)
		}
		return nil
	}},

	oneOf("advantage.estimator", func(c Config) string { return c.Advantage.Estimator }, confclip.AdvantageNames),
	oneOf("advantage.scale", func(c Config) string { return c.Advantage.Scale }, confclip.ScaleNames),
	{Key: "advantage.scale", Accepts: text("a scale other than group only with estimator grpo"), Test: func(c Config) error {
		_, err := confclip.AdvantageFor(c.Advantage.Estimator, c.Advantage.Scale) // its error names the keys
		return err
	}},
	inRange("advantage.std_filter_beta", func(c Config) float64 { return c.Advantage.StdFilterBeta }, 0, math.MaxFloat64, "want 0 (off) or more"),
	inRange("advantage.std_filter_ema", func(c Config) float64 { return c.Advantage.StdFilterEMA }, 0, 1, "want a weight from 0 to 1"),

	// train.*: the train package's own rows.
}, settings.Lift(train.Checks(), func(c Config) train.Config { return c.Train }), []check{

	atLeast("run.steps", func(c Config) int { return c.Run.Steps }, 1, "want at least 1 step"),
	atLeast("run.prompts_per_step", func(c Config) int { return c.Run.PromptsPerStep }, 1, "want at least 1 prompt per step"),
	atLeast("run.eval_every", func(c Config) int { return c.Run.EvalEvery }, 0, "want 0 (never) or a number of steps"),
})

// Accepts is what Validate accepts for a key, in words ("" when it does
// not check the key): the commands' help shows it beside a config flag.
func Accepts(key string) string { return settings.Accepts(checks, key) }

// Checks is Validate's table, for a configuration that holds Config
// (experiments.File) to lift into its own.
func Checks() []settings.Check[Config] { return slices.Clone(checks) }

// didYouMean suggests the known name nearest to v, or "".
func didYouMean(v string, known []string) string { return settings.DidYouMean(v, known) }
