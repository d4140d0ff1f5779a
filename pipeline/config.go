// Package pipeline runs the stages as library functions: scoring a set of
// rollouts, exporting a training set, and the run loop. Config is the one TOML
// file that describes all of them; each table maps onto one stage's options.
package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"sort"
	"strconv"
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
	Experiment ExperimentConfig         `toml:"experiment"`
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

// ExperimentConfig is the grid of `confclip experiment`: every arm with
// every seed, from each start (model.path when Starts is empty).
type ExperimentConfig struct {
	Arms  []string `toml:"arms"`  // names of Arms
	Seeds []uint64 `toml:"seeds"` // rollout and adapter seeds
	// Starts are the pre-trained models the grid is run from: pre-training
	// seeds (each pre-trained on Corpus with the Pretrain* settings, cached
	// by seed in run.out/starts) or model paths.
	Starts        []Start `toml:"starts"`
	Corpus        string  `toml:"corpus"`         // pre-training texts for seed starts
	PretrainSteps int     `toml:"pretrain_steps"` // as confclip pretrain --steps
	PretrainBatch int     `toml:"pretrain_batch"` // as confclip pretrain --batch
	PretrainLR    float64 `toml:"pretrain_lr"`    // as confclip pretrain --lr
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
		Experiment: ExperimentConfig{Arms: []string{"binary_grpo", "confclip_grpo", "confclip_dr_grpo"}, Seeds: []uint64{1, 2, 3}, PretrainSteps: 800, PretrainBatch: 16, PretrainLR: 3e-3},
	}
}

// LoadConfig reads a TOML file over the defaults. A key the file has but
// Config does not is an error that names the key.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
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
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String() + settings.DidYouMean(k.String(), configKeyNames())
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

// Start is one entry of experiment.starts: a pre-training seed (a TOML
// integer) or a model path (a TOML string).
type Start struct {
	Seed uint64
	Path string
}

// UnmarshalTOML reads an integer as a pre-training seed, a string as a path.
func (s *Start) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return fmt.Errorf("start %d: a pre-training seed is 0 or more", x)
		}
		*s = Start{Seed: uint64(x)}
	case string:
		if x == "" {
			return errors.New("start \"\": want a model path or a pre-training seed")
		}
		*s = Start{Path: x}
	default:
		return fmt.Errorf("start %v: want a pre-training seed (integer) or a model path (string)", v)
	}
	return nil
}

// MarshalTOML writes a start as it is read.
func (s Start) MarshalTOML() ([]byte, error) {
	if s.Path != "" {
		return []byte(strconv.Quote(s.Path)), nil
	}
	return []byte(strconv.FormatUint(s.Seed, 10)), nil
}

// Name is the start's folder name in an experiment: pretrain-seed-N, or the
// model file's name without .gguf.
func (s Start) Name() string {
	if s.Path != "" {
		return strings.TrimSuffix(filepath.Base(s.Path), ".gguf")
	}
	return fmt.Sprintf("pretrain-seed-%d", s.Seed)
}

// Arm is one configuration of an experiment: a reward, an advantage
// estimator and its scale; everything else is shared.
type Arm struct {
	Name      string
	Reward    string // reward.method
	Advantage string // advantage.estimator
	Scale     string // advantage.scale
	// SelfCertaintyWeight is reward.self_certainty_weight (0 in every arm
	// but the one that adds self-certainty to ConfClip).
	SelfCertaintyWeight float64
	// EntropyCoef is train.entropy_coef (0 in every arm but the one with
	// the entropy term).
	EntropyCoef float64
}

// Arms are the arms `confclip experiment` knows by name. ConfClip with GRPO
// divides by the batch's std: with each group's own std, a weak model's
// all-wrong groups turn tiny confidence differences into full-size
// advantages and collapse (docs/method.md, "Our reading: ConfClip with
// GRPO's std"); confclip_grpo_group is that variant, kept for comparison.
var Arms = []Arm{
	{"binary_grpo", "binary", "grpo", "group", 0, 0},
	{"confclip_grpo", "confclip", "grpo", "batch", 0, 0},
	{"confclip_grpo_group", "confclip", "grpo", "group", 0, 0},
	{"binary_grpo_batch", "binary", "grpo", "batch", 0, 0},
	{"confclip_dr_grpo", "confclip", "dr_grpo", "group", 0, 0},
	{"binary_dr_grpo", "binary", "dr_grpo", "group", 0, 0},
	{"confclip_rloo", "confclip", "rloo", "group", 0, 0},
	{"rlcr_grpo", "rlcr", "grpo", "group", 0, 0},
	{"self_certainty_grpo", "self_certainty", "grpo", "group", 0, 0},
	{"confclip_sc_grpo", "confclip", "grpo", "batch", ConfClipSCWeight, 0},
	{"answer_prob_grpo", "answer_prob", "grpo", "group", 0, 0},
	{"binary_grpo_entropy", "binary", "grpo", "group", 0, ArmEntropyCoef},
}

// ConfClipSCWeight is the self-certainty weight of arm confclip_sc_grpo:
// small beside ConfClip's rewards (about [-0.95, 0.95]), so that
// self-certainty orders the completions ConfClip scores alike rather than
// override the verdict; the experiment measures what it does.
const ConfClipSCWeight = 0.1

// ArmEntropyCoef is train.entropy_coef in arm binary_grpo_entropy: beside
// token_mean advantages of about unit size, a bonus that changes a token's
// gradient by a hundredth of the entropy's (verl's former default was
// 0.001, whose effect on a LoRA adapter over a few dozen steps is below
// the seeds' spread); the experiment measures what it does.
const ArmEntropyCoef = 0.01

// ArmByName is the arm of Arms with that name.
func ArmByName(name string) (Arm, error) {
	for _, a := range Arms {
		if a.Name == name {
			return a, nil
		}
	}
	var names []string
	for _, a := range Arms {
		names = append(names, a.Name)
	}
	return Arm{}, fmt.Errorf("unknown arm %q (known: %s)", name, strings.Join(names, ", "))
}

// CheckStarts checks experiment.starts: distinct folder names, and the
// pre-training settings when a start is a seed.
func CheckStarts(e ExperimentConfig) error {
	var errs []error
	names := map[string]int{}
	seeds := false
	for i, s := range e.Starts {
		if j, dup := names[s.Name()]; dup {
			errs = append(errs, fmt.Errorf("experiment.starts: entries %d and %d have the same name %q (the start's folder)", j+1, i+1, s.Name()))
		}
		names[s.Name()] = i
		seeds = seeds || s.Path == ""
	}
	if seeds {
		if e.Corpus == "" {
			errs = append(errs, errors.New("experiment.corpus: a pre-training seed in experiment.starts needs the corpus to pre-train on"))
		}
		if e.PretrainSteps < 1 || e.PretrainBatch < 1 {
			errs = append(errs, fmt.Errorf("experiment.pretrain_steps, pretrain_batch = %d, %d: want at least 1 each", e.PretrainSteps, e.PretrainBatch))
		}
		if !(e.PretrainLR > 0) || math.IsInf(e.PretrainLR, 0) {
			errs = append(errs, fmt.Errorf("experiment.pretrain_lr = %g: want a positive learning rate", e.PretrainLR))
		}
	}
	return errors.Join(errs...)
}
