// Package verifiers checks completions against reference answers: math,
// exact match, multiple choice, format and an external command. A verifier is
// one small interface; a registry maps config names to constructors;
// composition (a weighted sum of several verifiers) lives outside them.
package verifiers

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Result is a verifier's verdict on one completion.
type Result struct {
	Score     float64 // in [0, 1]
	Correct   bool
	Extracted string // the answer found in the completion ("" when none)
	// Start and End are the byte span [Start, End) of the extracted answer in
	// the completion; both are -1 when nothing was extracted.
	Start, End int
	Reason     string
}

// Verifier checks one completion against a reference answer. Implementations
// are safe for concurrent use and must return promptly when ctx is done.
type Verifier interface {
	Verify(ctx context.Context, completion, reference string) (Result, error)
}

// Options configures the verifiers; each one reads the fields it needs.
// It is the [verifier] table of the configuration (Config adds the name):
// a setting of a verifier is a field here with its toml tag, its default in
// DefaultConfig and its check in Checks, nowhere else.
type Options struct {
	TimeoutMS  int     `toml:"timeout_ms"`  // per verification, in milliseconds (0 = 2000)
	MaxBytes   int     `toml:"max_bytes"`   // completions are capped to this many bytes (0 = 64 KiB)
	RelTol     float64 `toml:"rel_tol"`     // math: relative tolerance for irrational values (0 = 1e-6)
	AbsTol     float64 `toml:"abs_tol"`     // math: absolute tolerance beside it, for values near 0 (0 = 1e-12)
	LastNumber bool    `toml:"last_number"` // math: fall back to the last number in the completion
	// Strict (math) credits an answer in a final-answer form only (boxed,
	// gsm8k, answer_is, answer_colon) or a completion that is nothing but
	// a number: no last-number fallback, which a policy trained against
	// the verifier can learn to game by ending on any number. Unset (nil)
	// is false here; run and experiment make it true
	// (pipeline.TrainingDefaults).
	Strict      *bool    `toml:"strict"`
	Extractors  []string `toml:"extractors"`   // math: extraction priority (default: boxed, gsm8k, answer_is, answer_colon)
	CaseFold    bool     `toml:"case_fold"`    // exact: ignore case (false here; true in DefaultConfig)
	IgnorePunct bool     `toml:"ignore_punct"` // exact: ignore punctuation
	Pattern     string   `toml:"pattern"`      // format: regular expression the completion must match
	JSON        bool     `toml:"json"`         // format: the completion must be a JSON value
	Command     []string `toml:"command"`      // command: argv, no shell
	MemoryMB    int      `toml:"memory_mb"`    // command: address-space limit (0 = none)
	CPUSeconds  int      `toml:"cpu_seconds"`  // command: CPU-time limit (0 = none)
}

// Timeout is TimeoutMS as a duration.
func (o Options) Timeout() time.Duration { return time.Duration(o.TimeoutMS) * time.Millisecond }

// strict is Strict with nil as false.
func (o Options) strict() bool { return o.Strict != nil && *o.Strict }

// Defaults applied by New to zero fields of Options; DefaultConfig has
// them too.
const (
	DefaultTimeoutMS = 2000
	DefaultMaxBytes  = 64 << 10
	DefaultRelTol    = 1e-6
	DefaultAbsTol    = 1e-12
)

// DefaultExtractors is the math extraction priority when Options.Extractors
// is empty; "last_number" is appended when Options.LastNumber is set.
var DefaultExtractors = []string{"boxed", "gsm8k", "answer_is", "answer_colon"}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.TimeoutMS <= 0 {
		o.TimeoutMS = DefaultTimeoutMS
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.RelTol <= 0 {
		o.RelTol = DefaultRelTol
	}
	if o.AbsTol <= 0 {
		o.AbsTol = DefaultAbsTol
	}
	if len(o.Extractors) == 0 {
		o.Extractors = DefaultExtractors
	}
	return o
}

var registry = map[string]func(Options) (Verifier, error){}

// Register adds a constructor under a name; it panics on a duplicate.
func Register(name string, fn func(Options) (Verifier, error)) {
	if _, dup := registry[name]; dup {
		panic("verifiers: duplicate " + name)
	}
	registry[name] = fn
}

// New builds the verifier registered under name.
func New(name string, opts Options) (Verifier, error) {
	fn, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown verifier %q (known: %v)", name, Names())
	}
	return fn(opts.withDefaults())
}

// NewTruncated builds the verifier for completions the length limit cut
// off: New's with Options.Strict set, so that math credits only a final
// answer the model gave before the cut, not the last number of a text that
// stopped mid-way. The other verifiers have no fallback and are New's.
func NewTruncated(name string, opts Options) (Verifier, error) {
	opts.Strict = new(true)
	return New(name, opts)
}

// NeedsReference reports whether the verifier registered under name
// compares with a reference answer (math, exact, choice); format checks the
// completion alone and command's checker may do without.
func NeedsReference(name string) bool {
	switch name {
	case "math", "exact", "choice":
		return true
	}
	return false
}

// Names lists the registered verifiers, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
