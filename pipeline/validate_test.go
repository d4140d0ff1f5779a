package pipeline

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
)

func TestValidateDefaults(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}

// TestValidateRejects: every value issue 13 found starting without
// complaint is an error naming its key (and an unknown name suggests the
// nearest known one).
func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"NaN lr", func(c *Config) { c.Train.LR = math.NaN() }, "train.lr: NaN is not a finite number"},
		{"Inf lr", func(c *Config) { c.Train.LR = math.Inf(1) }, "train.lr: +Inf is not a finite number"},
		{"zero lr", func(c *Config) { c.Train.LR = 0 }, "train.lr: 0"},
		{"NaN lora_alpha", func(c *Config) { c.Train.LoraAlpha = math.NaN() }, "train.lora_alpha: NaN"},
		{"-Inf lora_alpha", func(c *Config) { c.Train.LoraAlpha = math.Inf(-1) }, "train.lora_alpha: -Inf"},
		{"huge lora_rank", func(c *Config) { c.Train.LoraRank = 100000 }, "train.lora_rank: 100000"},
		{"zero lora_rank", func(c *Config) { c.Train.LoraRank = 0 }, "train.lora_rank: 0"},
		{"max_tokens -1", func(c *Config) { c.Rollout.MaxTokens = -1 }, "rollout.max_tokens: -1"}, // 0 is the context left
		{"micro_batch -1", func(c *Config) { c.Train.MicroBatch = -1 }, "train.micro_batch: -1"},
		{"memory without a unit", func(c *Config) { c.Train.Memory = "2048" }, "train.memory: memory size \"2048\": want a number and a unit"},
		{"memory in PiB", func(c *Config) { c.Train.Memory = "1 PiB" }, "unknown unit \"PiB\""},
		{"threads -1", func(c *Config) { c.Model.Threads = -1 }, "model.threads: -1"},
		{"ctx 0", func(c *Config) { c.Model.Ctx = 0 }, "model.ctx: 0"},
		{"ctx -5", func(c *Config) { c.Model.Ctx = -5 }, "model.ctx: -5"},
		{"prompts_per_step 0", func(c *Config) { c.Run.PromptsPerStep = 0 }, "run.prompts_per_step: 0"},
		{"eval_every -1", func(c *Config) { c.Run.EvalEvery = -1 }, "run.eval_every: -1"},
		{"timeout_ms 0", func(c *Config) { c.Verifier.TimeoutMS = 0 }, "verifier.timeout_ms: 0"},
		{"timeout_ms -1", func(c *Config) { c.Verifier.TimeoutMS = -1 }, "verifier.timeout_ms: -1"},
		{"max_bytes 0", func(c *Config) { c.Verifier.MaxBytes = 0 }, "verifier.max_bytes: 0"},
		{"memory_mb -1", func(c *Config) { c.Verifier.MemoryMB = -1 }, "verifier.memory_mb: -1"},
		{"cpu_seconds -1", func(c *Config) { c.Verifier.CPUSeconds = -1 }, "verifier.cpu_seconds: -1"},
		{"empty targets", func(c *Config) { c.Train.Targets = nil }, "train.targets: empty"},
		{"unknown target", func(c *Config) { c.Train.Targets = []string{"attn_qq"} }, `did you mean "attn_q"?`},
		{"unknown verifier", func(c *Config) { c.Verifier.Name = "maths" }, `verifier.name: unknown name "maths", did you mean "math"?`},
		{"unknown estimator", func(c *Config) { c.Advantage.Estimator = "gpro" }, `advantage.estimator: unknown name "gpro"`},
		{"lo above hi", func(c *Config) { c.Reward.Lo, c.Reward.Hi = 0.9, 0.5 }, "reward.lo: 0.9 is above reward.hi = 0.5"},
		{"NaN reward.lo", func(c *Config) { c.Reward.Lo = math.NaN() }, "reward.lo: NaN"},
		{"top_p 0", func(c *Config) { c.Rollout.TopP = 0 }, "rollout.top_p: 0"},
		{"negative temperature", func(c *Config) { c.Rollout.Temperature = -1 }, "rollout.temperature: -1"},
		{"group 0", func(c *Config) { c.Rollout.Group = 0 }, "rollout.group: 0"},
		{"unknown loss", func(c *Config) { c.Train.LossAgg = "tokenmean" }, "train.loss_agg"},
		{"unknown schedule", func(c *Config) { c.Train.Schedule = "cosin" }, "train.schedule"},
		{"command without argv", func(c *Config) { c.Verifier.Name = "command" }, "verifier:"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// Several problems are reported together.
	c := DefaultConfig()
	c.Train.LR, c.Model.Ctx = math.NaN(), 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "train.lr") || !strings.Contains(err.Error(), "model.ctx") {
		t.Errorf("two problems: got %v", err)
	}
}

// TestRunValidatesBeforeCreating: a configuration that used to fail only
// in step 1 (reward.lo > reward.hi) now fails before the run folder exists,
// so nothing is left that would need --resume.
func TestRunValidatesBeforeCreating(t *testing.T) {
	cfg := runFixture(t)
	cfg.Reward.Lo, cfg.Reward.Hi = 0.9, 0.5
	_, err := Run(context.Background(), RunOptions{Config: cfg})
	if err == nil || !strings.Contains(err.Error(), "reward.lo") {
		t.Fatalf("got %v, want the reward.lo error", err)
	}
	if _, err := os.Stat(cfg.Run.Out); !os.IsNotExist(err) {
		t.Fatalf("the run folder was created (%v)", err)
	}
}
