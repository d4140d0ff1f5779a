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
	"github.com/confclip/confclip/scoring"
)

// Config is the whole TOML configuration. Every command reads the tables it
// needs; flags given on the command line win over the file.
type Config struct {
	Model      ModelConfig              `toml:"model"`
	Data       DataConfig               `toml:"data"`
	Rollout    RolloutConfig            `toml:"rollout"`
	Verifier   scoring.VerifierConfig   `toml:"verifier"`
	Confidence scoring.ConfidenceConfig `toml:"confidence"`
	Reward     scoring.RewardConfig     `toml:"reward"`
	Advantage  scoring.AdvantageConfig  `toml:"advantage"`
	Train      TrainConfig              `toml:"train"`
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

// RolloutConfig is the sampling setup.
type RolloutConfig struct {
	Group       int      `toml:"group"`       // completions per prompt (G)
	MaxTokens   int      `toml:"max_tokens"`  // completion length limit; 0 = the context left after the prompt
	Temperature float64  `toml:"temperature"` // sampling temperature
	TopP        float64  `toml:"top_p"`       // nucleus; 1 = off
	TopK        int      `toml:"top_k"`       // 0 = off
	MinP        float64  `toml:"min_p"`       // 0 = off
	Seed        uint64   `toml:"seed"`        // base seed
	Parallel    int      `toml:"parallel"`    // sequences in flight
	Chat        bool     `toml:"chat"`        // render prompts with the chat template
	Stop        []string `toml:"stop"`        // stop strings
	// Endpoints, when set, are the rollout workers of `run`
	// ("http://host:port/v1"): OpenAI-compatible servers, confclip serve
	// for adapter uploads (docs/scale.md).
	Endpoints []string `toml:"endpoints"`
}

// TrainConfig is the policy-gradient step.
type TrainConfig struct {
	LoraRank    int      `toml:"lora_rank"`
	LoraAlpha   float64  `toml:"lora_alpha"`
	Targets     []string `toml:"targets"` // attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_gate, ffn_up, ffn_down
	LR          float64  `toml:"lr"`
	Beta1       float64  `toml:"beta1"`
	Beta2       float64  `toml:"beta2"`
	Eps         float64  `toml:"eps"`
	WeightDecay float64  `toml:"weight_decay"`
	GradClip    float64  `toml:"grad_clip"`
	LossAgg     string   `toml:"loss_agg"`     // token_mean, seq_mean_token_mean, seq_mean_token_sum_norm (or grpo, bnpo, dr_grpo, dapo)
	Iterations  int      `toml:"iterations"`   // updates per batch (mu)
	Epsilon     float64  `toml:"epsilon"`      // ratio clip below: 1 - epsilon
	EpsilonHigh float64  `toml:"epsilon_high"` // ratio clip above: 1 + epsilon_high (0 = epsilon)
	Beta        float64  `toml:"beta"`         // weight of the k3 KL to the model without the adapter
	EntropyCoef float64  `toml:"entropy_coef"` // weight of the completion tokens' entropy, subtracted from the loss (a bonus; < 0 a penalty)
	Temperature float64  `toml:"temperature"`  // the loss's log-probs are of softmax(logits / temperature); 1 = the model's own
	Schedule    string   `toml:"schedule"`     // constant, linear, cosine
	WarmupSteps int      `toml:"warmup_steps"` // updates of linear warm-up
	MicroBatch  int      `toml:"micro_batch"`  // tokens packed into one forward-backward pass (its memory); 0 = sized from memory
	Memory      string   `toml:"memory"`       // what a pass's activations may take, "2GiB"; "" = a quarter of the free memory
	Seed        uint64   `toml:"seed"`
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
		Rollout:    RolloutConfig{Group: 8, MaxTokens: 0, Temperature: 1, TopP: 1},
		Verifier:   scoring.VerifierConfig{Name: "math", TimeoutMS: 2000, MaxBytes: 64 << 10, RelTol: 1e-6, LastNumber: true, CaseFold: true, MemoryMB: 512, CPUSeconds: 10},
		Confidence: scoring.ConfidenceConfig{Estimator: "geo_mean", Scope: "completion"},
		Reward:     scoring.RewardConfig{Method: "confclip", Weight: "absolute", Lo: 0.2, Hi: 0.95, Eps: 0.2, Lambda: 1},
		Advantage:  scoring.AdvantageConfig{Estimator: "grpo", Scale: "group", StdFilterEMA: 0.99},
		Train: TrainConfig{LoraRank: 8, LoraAlpha: 16, LR: 1e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
			GradClip: 1, LossAgg: "token_mean", Iterations: 1, Epsilon: 0.2, Schedule: "constant", Temperature: 1,
			Targets: []string{"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}},
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
			keys[i] = k.String() + didYouMean(k.String(), configKeyNames())
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
