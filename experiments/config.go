package experiments

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/confclip/confclip/internal/settings"
	"github.com/confclip/confclip/pipeline"
)

// File is the configuration `confclip experiment` reads: the tables of a
// run (pipeline.Config, whose keys it holds as its own) and [experiment].
// The command line reads every command's file as a File, so that one file
// serves `run` and `experiment` (examples/demo.toml).
type File struct {
	pipeline.Config
	Experiment Config `toml:"experiment"`
}

// Config is [experiment], the grid of `confclip experiment`: every arm
// with every seed, from each start (model.path when Starts is empty).
type Config struct {
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

// DefaultConfig is [experiment] when the file does not say otherwise.
func DefaultConfig() Config {
	return Config{Arms: []string{"binary_grpo", "confclip_grpo", "confclip_dr_grpo"}, Seeds: []uint64{1, 2, 3}, PretrainSteps: 800, PretrainBatch: 16, PretrainLR: 3e-3}
}

// DefaultFile is every table's defaults.
func DefaultFile() File { return File{Config: pipeline.DefaultConfig(), Experiment: DefaultConfig()} }

// LoadFile reads a TOML file over DefaultFile (pipeline.Load: a key no
// table has is an error that names it).
func LoadFile(path string) (File, error) { return pipeline.Load(path, DefaultFile()) }

// Checks are [experiment]'s rows of checks.
func Checks() []settings.Check[Config] {
	return []settings.Check[Config]{
		{Key: "experiment.arms", Accepts: func() string { return "arms of " + strings.Join(ArmNames(), ", ") }, Test: func(c Config) error {
			var errs []error
			for _, arm := range c.Arms {
				if _, err := ArmByName(arm); err != nil {
					errs = append(errs, settings.Refuse("experiment.arms", "%v", err))
				}
			}
			return errors.Join(errs...)
		}},
		{Key: "experiment.starts", Accepts: settings.Text("distinct names; with a seed, experiment.corpus and pre-training settings of at least 1 step, 1 text, a positive rate"), Test: checkStarts},
	}
}

// fileChecks is the File's table: pipeline's rows, then [experiment]'s.
func fileChecks() []settings.Check[File] {
	return slices.Concat(
		settings.Lift(pipeline.Checks(), func(f File) pipeline.Config { return f.Config }),
		settings.Lift(Checks(), func(f File) Config { return f.Experiment }))
}

// Validate checks every key of the file (pipeline.Config.Validate and
// [experiment]'s rows), all problems together, each naming its key.
func (f File) Validate() error { return settings.Run(f, fileChecks()) }

// CheckedValues is the File's table of checks as Markdown, one row per key
// with what it accepts: docs/config.md holds it (a test keeps the two the
// same).
func CheckedValues() string { return settings.Table(fileChecks()) }

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
	return Arm{}, fmt.Errorf("unknown arm %q%s (known: %s)", name, settings.DidYouMean(name, ArmNames()), strings.Join(ArmNames(), ", "))
}

// ArmNames are the names of Arms, in order.
func ArmNames() []string {
	names := make([]string, len(Arms))
	for i, a := range Arms {
		names[i] = a.Name
	}
	return names
}

// checkStarts checks experiment.starts: distinct folder names, and the
// pre-training settings when a start is a seed.
func checkStarts(e Config) error {
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
