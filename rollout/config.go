package rollout

import (
	"math"

	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/sampler"
)

// DefaultGroup is rollout.group's default: completions per prompt.
const DefaultGroup = 8

// MaxGroup bounds rollout.group and rollout.parallel: each completion in
// flight holds a sequence's state, and a million of them exhausts memory
// before any error.
const MaxGroup = 4096

// DefaultOptions is the [rollout] table's defaults: G = 8 completions a
// prompt, the length limit the context leaves, the model's own
// distribution (temperature 1, no truncation).
func DefaultOptions() Options {
	return Options{Group: DefaultGroup, Params: sampler.Params{Temperature: 1, TopP: 1}}
}

// Checks is the [rollout] table's rows of the configuration's checks;
// NewEngine and a request's settings (Engine.Serve) run them too.
func Checks() []settings.Check[Options] {
	return []settings.Check[Options]{
		settings.AtLeast("rollout.group", func(o Options) int { return o.Group }, 1, "want at least 1 completion per prompt"),
		settings.AtMost("rollout.group", func(o Options) int { return o.Group }, MaxGroup),
		settings.AtMost("rollout.parallel", func(o Options) int { return o.Parallel }, MaxGroup),
		settings.AtLeast("rollout.max_tokens", func(o Options) int { return o.MaxTokens }, 0, "want a completion length limit of at least 1 token, or 0 for the context left after the prompt"),
		settings.InRange("rollout.temperature", func(o Options) float64 { return o.Temperature }, 0, math.MaxFloat64, "want 0 (greedy) or more"),
		{Key: "rollout.top_p", Accepts: settings.Text("a value in (0, 1]"), Test: func(o Options) error {
			p := o.TopP
			if err := settings.NotFinite("rollout.top_p", p); err != nil {
				return err
			}
			if p <= 0 || p > 1 {
				return settings.Refuse("rollout.top_p", "%v: want a value in (0, 1]", p)
			}
			return nil
		}},
		settings.AtLeast("rollout.top_k", func(o Options) int { return o.TopK }, 0, "want 0 (off) or more"),
		settings.InRange("rollout.min_p", func(o Options) float64 { return o.MinP }, 0, 1, "want a value in [0, 1]"),
		settings.AtLeast("rollout.parallel", func(o Options) int { return o.Parallel }, 0, "want 0 (automatic) or more"),
		{Key: "rollout.stop", Accepts: settings.Text("non-empty stop strings"), Test: func(o Options) error {
			for _, s := range o.Stop {
				if s == "" {
					return settings.Refuse("rollout.stop", "an empty stop string (it would stop every completion at once)")
				}
			}
			return nil
		}},
	}
}

// check fills what a Go caller left zero and runs Checks: group 0 is
// DefaultGroup; top_p 0 is off, as sampler reads it (a configuration file
// refuses it: llama.cpp reads it as greedy).
func (o *Options) check() error {
	if o.Group == 0 {
		o.Group = DefaultGroup
	}
	if o.TopP == 0 {
		o.TopP = 1
	}
	return settings.Run(*o, Checks())
}
