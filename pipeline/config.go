// Package pipeline runs the stages as library functions: scoring a set of
// rollouts, exporting a training set, and the run loop. Config is the one TOML
// file that describes all of them; each table maps onto one stage's options.
package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/scoring"
	"github.com/confclip/confclip/train"
	"github.com/confclip/confclip/verifiers"
)

// Config is the whole TOML configuration. Every command reads the tables it
// needs; flags given on the command line win over the file. A table a
// package owns is that package's type, with its toml tags, its defaults and
// its checks (rollout.Options, verifiers.Config, train.Config, scoring's);
// pipeline's own tables are below.
type Config struct {
	Model      ModelConfig              `toml:"model"`
	Data       DataConfig               `toml:"data"`
	Rollout    rollout.Options          `toml:"rollout"`
	Verifier   verifiers.Config         `toml:"verifier"`
	Confidence scoring.ConfidenceConfig `toml:"confidence"`
	Reward     scoring.RewardConfig     `toml:"reward"`
	Advantage  scoring.AdvantageConfig  `toml:"advantage"`
	Train      train.Config             `toml:"train"`
	Run        RunConfig                `toml:"run"`
}

// ModelConfig says which model to load and how.
type ModelConfig struct {
	Path      string `toml:"path"`       // GGUF model file
	Adapter   string `toml:"adapter"`    // optional LoRA adapter (GGUF)
	GPULayers int    `toml:"gpu_layers"` // layers to offload (0 = CPU only, -1 = all)
	Threads   int    `toml:"threads"`    // 0 = number of cores
	Ctx       int    `toml:"ctx"`        // context size in tokens
	// Device is the ggml backend device to run on ("CUDA0", "Metal", "CPU";
	// `confclip version` lists them); "" = llama.cpp's choice.
	Device string `toml:"device"`
	// ChatTemplate is a chat template's text or a built-in name ("chatml",
	// "llama3", ...) for models without one; "" = the model's own.
	ChatTemplate string `toml:"chat_template"`
}

// DataConfig names the prompt files.
type DataConfig struct {
	Train string `toml:"train"` // prompts for training (JSONL or Parquet, any shape dataset.ReadPrompts knows)
	Eval  string `toml:"eval"`  // held-out prompts (JSONL or Parquet)
	// Map names the prompt fields of a file of another shape, as --map
	// does: "prompt=question,answer=solution:boxed" (dataset.ParseFieldMap).
	Map string `toml:"map"`
}

// RunConfig is the schedule of `confclip run`.
type RunConfig struct {
	Steps          int    `toml:"steps"`
	PromptsPerStep int    `toml:"prompts_per_step"`
	EvalEvery      int    `toml:"eval_every"`
	Out            string `toml:"out"`
}

// DefaultConfig is the configuration used when neither file nor flag says otherwise.
func DefaultConfig() Config {
	return Config{
		Model:      ModelConfig{Ctx: 2048},
		Rollout:    rollout.DefaultOptions(),
		Verifier:   verifiers.DefaultConfig(),
		Confidence: scoring.ConfidenceConfig{Estimator: "geo_mean", Scope: "completion"},
		Reward:     scoring.RewardConfig{Method: "confclip", Weight: "absolute", Lo: 0.2, Hi: 0.95, Eps: 0.2, Lambda: 1},
		Advantage:  scoring.AdvantageConfig{Estimator: "grpo", Scale: "group", StdFilterEMA: 0.99},
		Train:      train.DefaultConfig(),
		Run:        RunConfig{Steps: 10, PromptsPerStep: 8, EvalEvery: 5, Out: "runs/run"},
	}
}

// LoadConfig reads a TOML file over the defaults. A key the file has but
// Config does not is an error that names the key.
func LoadConfig(path string) (Config, error) { return Load(path, DefaultConfig()) }

// Load reads a TOML file over def, a configuration struct (Config, or one
// that embeds it: experiments.File). A key the file has but the struct does
// not is an error that names the key and suggests the nearest one; a file
// that does not parse is ErrConfig. An empty path is def.
func Load[T any](path string, def T) (T, error) {
	cfg := def
	if path == "" {
		return cfg, nil
	}
	md, err := toml.DecodeFile(path, &cfg)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return cfg, configError{fmt.Errorf("%s: %w", path, err)}
	}
	if und := md.Undecoded(); len(und) > 0 {
		var known []string
		for _, k := range settings.Keys(def) {
			known = append(known, k.Name)
		}
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String() + settings.DidYouMean(k.String(), known)
		}
		sort.Strings(keys)
		return cfg, configError{fmt.Errorf("%s: unknown key %s", path, strings.Join(keys, ", "))}
	}
	return cfg, nil
}

// TrainingDefaults sets what is unset in cfg to its value for training
// against the verifier (run, experiment): verifier.strict = true.
func TrainingDefaults(cfg Config) Config {
	if cfg.Verifier.Strict == nil {
		strict := true
		cfg.Verifier.Strict = &strict
	}
	return cfg
}

// ErrConfig is what errors.Is finds in an error of the configuration a
// user wrote (a file that does not parse, an unknown key): like a bad flag,
// a usage error, which the command line exits with status 2 for.
var ErrConfig = errors.New("bad configuration")

type configError struct{ error }

func (configError) Is(target error) bool { return target == ErrConfig }
func (e configError) Unwrap() error      { return e.error }

// ErrNoModel is returned by stages that need a model when none was given.
var ErrNoModel = errors.New("no model given (--model or [model] path)")
