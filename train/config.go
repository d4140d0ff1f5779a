package train

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/confclip/confclip/internal/settings"
)

// MaxLoraRank bounds train.lora_rank: a rank beyond the model's widths
// adds nothing and a huge one exhausts memory before any error.
const MaxLoraRank = 1024

// Checks is the [train] table's rows of the configuration's checks: a new
// adapter's (CreateLoRA runs them) and the step's (NewLoRATrainer runs
// them).
func Checks() []settings.Check[Config] { return append(loraChecks(), stepChecks()...) }

type check = settings.Check[Config]

func loraChecks() []check {
	return []check{
		{Key: "train.lora_rank", Accepts: settings.Text(fmt.Sprintf("a rank from 1 to %d", MaxLoraRank)), Test: func(c Config) error {
			if r := c.LoraRank; r < 1 || r > MaxLoraRank {
				return settings.Refuse("train.lora_rank", "%d: want a rank from 1 to %d", r, MaxLoraRank)
			}
			return nil
		}},
		settings.Positive("train.lora_alpha", func(c Config) float64 { return c.LoraAlpha }, "want a positive scale"),
		{Key: "train.targets", Accepts: func() string { return "a non-empty list of " + strings.Join(Targets, ", ") }, Test: func(c Config) error {
			if len(c.Targets) == 0 {
				return settings.Refuse("train.targets", "empty: name the matrices to adapt (%s)", strings.Join(Targets, ", "))
			}
			var errs []error
			for _, tg := range c.Targets {
				errs = append(errs, settings.KnownName("train.targets", tg, Targets))
			}
			return errors.Join(errs...)
		}},
	}
}

func stepChecks() []check {
	return []check{
		settings.Positive("train.lr", func(c Config) float64 { return c.LR }, "want a positive learning rate"),
		settings.InRange("train.beta1", func(c Config) float64 { return c.Beta1 }, 0, math.Nextafter(1, 0), "want a decay in [0, 1)"),
		settings.InRange("train.beta2", func(c Config) float64 { return c.Beta2 }, 0, math.Nextafter(1, 0), "want a decay in [0, 1)"),
		settings.Positive("train.eps", func(c Config) float64 { return c.Eps }, "want a positive epsilon"),
		settings.InRange("train.weight_decay", func(c Config) float64 { return c.WeightDecay }, 0, math.MaxFloat64, "want 0 or more"),
		settings.InRange("train.grad_clip", func(c Config) float64 { return c.GradClip }, 0, math.MaxFloat64, "want 0 (off) or a positive norm"),
		settings.Wrap("train.loss_agg", "a loss aggregation train knows", func(c Config) error { _, err := LossAgg(c.LossAgg); return err }),
		settings.AtLeast("train.iterations", func(c Config) int { return c.Iterations }, 1, "want at least 1 update per batch"),
		settings.InRange("train.epsilon", func(c Config) float64 { return c.Epsilon }, 0, math.Nextafter(1, 0), "want a clip in [0, 1)"),
		settings.InRange("train.epsilon_high", func(c Config) float64 { return c.EpsilonHigh }, 0, math.MaxFloat64, "want 0 (= epsilon) or more"),
		settings.InRange("train.beta", func(c Config) float64 { return c.Beta }, 0, math.MaxFloat64, "want 0 (off) or more"),
		settings.InRange("train.temperature", func(c Config) float64 { return c.Temperature }, math.SmallestNonzeroFloat64, math.MaxFloat64, "want a positive number (1 = the model's own distribution; the rollout's temperature trains as TRL and verl do)"),
		settings.InRange("train.entropy_coef", func(c Config) float64 { return c.EntropyCoef }, -math.MaxFloat64, math.MaxFloat64, "want a finite number (0 = off; > 0 a bonus, < 0 a penalty)"),
		settings.Wrap("train.schedule", "a learning-rate schedule train knows", func(c Config) error {
			_, err := ScheduledLR(c.Schedule, 1, 1, 0, 1)
			return err
		}),
		settings.AtLeast("train.warmup_steps", func(c Config) int { return c.WarmupSteps }, 0, "want 0 or more updates"),
		settings.AtLeast("train.micro_batch", func(c Config) int { return c.MicroBatch }, 0, "want 0 (sized from train.memory) or a number of tokens per pass"),
		settings.Wrap("train.memory", `a size with a unit ("2GiB", "512MiB"), or "" for a quarter of the free memory`, func(c Config) error {
			_, err := ParseBytes(c.Memory)
			return err
		}),
	}
}
