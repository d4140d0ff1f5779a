package verifiers

import (
	"slices"

	"github.com/confclip/confclip/internal/settings"
)

// Config is the [verifier] table: the verifier's name and its Options.
type Config struct {
	Name    string `toml:"name"` // math, exact, choice, format, command (Names)
	Options        // the settings, inline in the table
}

// DefaultConfig is the [verifier] table's defaults.
func DefaultConfig() Config {
	return Config{Name: "math", Options: Options{TimeoutMS: DefaultTimeoutMS, MaxBytes: DefaultMaxBytes,
		RelTol: DefaultRelTol, AbsTol: DefaultAbsTol, LastNumber: true, CaseFold: true, MemoryMB: 512, CPUSeconds: 10}}
}

// New builds the verifier the table names.
func (c Config) New() (Verifier, error) { return New(c.Name, c.Options) }

// Checks is the [verifier] table's rows of the configuration's checks.
func Checks() []settings.Check[Config] {
	return []settings.Check[Config]{
		{Key: "verifier.name", Accepts: settings.Text("the name of a registered verifier (docs/verifiers.md)"), Test: func(c Config) error {
			return settings.KnownName("verifier.name", c.Name, Names())
		}},
		settings.AtLeast("verifier.timeout_ms", func(c Config) int { return c.TimeoutMS }, 1, "want a time limit of at least 1 ms"),
		settings.AtLeast("verifier.max_bytes", func(c Config) int { return c.MaxBytes }, 1, "want at least 1 byte"),
		settings.AtLeast("verifier.memory_mb", func(c Config) int { return c.MemoryMB }, 0, "want 0 (no limit) or a number of MiB"),
		settings.AtLeast("verifier.cpu_seconds", func(c Config) int { return c.CPUSeconds }, 0, "want 0 (no limit) or a number of seconds"),
		settings.InRange("verifier.rel_tol", func(c Config) float64 { return c.RelTol }, 0, 1, "want a relative tolerance in [0, 1]"),
		settings.InRange("verifier.abs_tol", func(c Config) float64 { return c.AbsTol }, 0, 1, "want an absolute tolerance in [0, 1]"),
		// Building the verifier checks the rest of its table: extractors, the
		// format pattern, that a command's checker exists.
		settings.Wrap("verifier", "settings the named verifier builds with (extractors, pattern, command)", func(c Config) error {
			if !slices.Contains(Names(), c.Name) {
				return nil
			}
			_, err := c.New()
			return err
		}),
	}
}
