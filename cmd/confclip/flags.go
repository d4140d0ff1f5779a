package main

import (
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/confclip/confclip/experiments"
	"github.com/confclip/confclip/pipeline"
)

// The flags that set a config key. Each flag shows the key's default (from
// pipeline.DefaultConfig) in --help, has the same name and meaning on every
// command, and takes llama.cpp's spelling as an alias where llama.cpp has
// the same option. A flag given on the command line wins over --config.

var defaults = pipeline.DefaultConfig()

// setters maps each config flag (the pointer: commands build their own) to
// what it sets.
var setters = map[cli.Flag]func(c *cli.Command, cfg *pipeline.Config){}

// configKeyRE finds the key a config flag's usage names: "([rollout] group)".
var configKeyRE = regexp.MustCompile(`\[(\w+)\] (\w+)\)`)

// withAccepts adds to a config flag's usage what pipeline.Config.Validate
// accepts for its key (the table docs/config.md lists too).
func withAccepts(usage string) string {
	m := configKeyRE.FindStringSubmatch(usage)
	if m == nil {
		return usage
	}
	if a := pipeline.Accepts(m[1] + "." + m[2]); a != "" {
		return usage + "; accepts " + a
	}
	return usage
}

func stringOpt(name string, aliases []string, usage string, field func(*pipeline.Config) *string) cli.Flag {
	f := &cli.StringFlag{Name: name, Aliases: aliases, Value: *field(&defaults), Usage: withAccepts(usage)}
	setters[f] = func(c *cli.Command, cfg *pipeline.Config) { *field(cfg) = c.String(name) }
	return f
}

func intOpt(name string, aliases []string, usage string, field func(*pipeline.Config) *int) cli.Flag {
	f := &cli.IntFlag{Name: name, Aliases: aliases, Value: *field(&defaults), Usage: withAccepts(usage)}
	setters[f] = func(c *cli.Command, cfg *pipeline.Config) { *field(cfg) = c.Int(name) }
	return f
}

func floatOpt(name string, aliases []string, usage string, field func(*pipeline.Config) *float64) cli.Flag {
	f := &cli.FloatFlag{Name: name, Aliases: aliases, Value: *field(&defaults), Usage: withAccepts(usage)}
	setters[f] = func(c *cli.Command, cfg *pipeline.Config) { *field(cfg) = c.Float(name) }
	return f
}

func boolOpt(name string, usage string, field func(*pipeline.Config) *bool) cli.Flag {
	f := &cli.BoolFlag{Name: name, Value: *field(&defaults), Usage: usage}
	setters[f] = func(c *cli.Command, cfg *pipeline.Config) { *field(cfg) = c.Bool(name) }
	return f
}

// modelFlags are [model]: which model, adapter, device and threads.
func modelFlags() []cli.Flag {
	return []cli.Flag{
		stringOpt("model", []string{"m"}, "GGUF model `FILE` ([model] path)", func(c *pipeline.Config) *string { return &c.Model.Path }),
		stringOpt("adapter", []string{"lora"}, "LoRA adapter `FILE` (GGUF) on top of the model ([model] adapter)", func(c *pipeline.Config) *string { return &c.Model.Adapter }),
		intOpt("threads", []string{"t"}, "CPU threads, 0 = automatic: rollouts one per 5M parameters up to the cores, training every core ([model] threads)", func(c *pipeline.Config) *int { return &c.Model.Threads }),
		intOpt("ctx-size", []string{"c", "ctx"}, "context of one sequence, prompt + completion, in tokens ([model] ctx)", func(c *pipeline.Config) *int { return &c.Model.Ctx }),
		intOpt("gpu-layers", []string{"ngl", "n-gpu-layers"}, "layers offloaded to the GPU, -1 = all ([model] gpu_layers)", func(c *pipeline.Config) *int { return &c.Model.GPULayers }),
		stringOpt("device", nil, "ggml `DEVICE` to run on, e.g. CUDA0 (confclip version lists them; [model] device)", func(c *pipeline.Config) *string { return &c.Model.Device }),
		stringOpt("chat-template", nil, "chat template text or built-in `NAME` (chatml, llama3, ...) ([model] chat_template)", func(c *pipeline.Config) *string { return &c.Model.ChatTemplate }),
	}
}

// samplingFlags are [rollout]: how completions are sampled.
func samplingFlags() []cli.Flag {
	stop := &cli.StringSliceFlag{Name: "stop", Usage: "stop `STRING`, taken literally but for \\n, \\t and \\\\ (repeatable; [rollout] stop)"}
	setters[stop] = func(c *cli.Command, cfg *pipeline.Config) {
		cfg.Rollout.Stop = nil
		for _, s := range c.StringSlice("stop") {
			cfg.Rollout.Stop = append(cfg.Rollout.Stop, unescape(s))
		}
	}
	seed := &cli.Uint64Flag{Name: "seed", Aliases: []string{"s"}, Value: defaults.Rollout.Seed, Usage: "base seed of every sequence's RNG ([rollout] seed)"}
	setters[seed] = func(c *cli.Command, cfg *pipeline.Config) { cfg.Rollout.Seed = c.Uint64("seed") }
	return []cli.Flag{
		intOpt("group", []string{"G"}, "completions per prompt ([rollout] group)", func(c *pipeline.Config) *int { return &c.Rollout.Group }),
		intOpt("max-tokens", []string{"n", "n-predict"}, "completion length limit in tokens, 0 = the context left after the prompt ([rollout] max_tokens)", func(c *pipeline.Config) *int { return &c.Rollout.MaxTokens }),
		floatOpt("temperature", []string{"temp"}, "sampling temperature, 0 = greedy ([rollout] temperature)", func(c *pipeline.Config) *float64 { return &c.Rollout.Temperature }),
		floatOpt("top-p", nil, "nucleus sampling: 1 = off, 0 = the most likely token only, as in llama.cpp ([rollout] top_p)", func(c *pipeline.Config) *float64 { return &c.Rollout.TopP }),
		intOpt("top-k", nil, "keep the K most likely tokens, 0 = off ([rollout] top_k)", func(c *pipeline.Config) *int { return &c.Rollout.TopK }),
		floatOpt("min-p", nil, "keep tokens with p >= min-p * p_max, 0 = off ([rollout] min_p)", func(c *pipeline.Config) *float64 { return &c.Rollout.MinP }),
		seed,
		intOpt("parallel", []string{"np"}, "sequences in flight, 0 = max(group, 16) ([rollout] parallel)", func(c *pipeline.Config) *int { return &c.Rollout.Parallel }),
		boolOpt("chat", "render plain prompts with the chat template ([rollout] chat)", func(c *pipeline.Config) *bool { return &c.Rollout.Chat }),
		stop,
	}
}

// verifierFlags are [verifier].
func verifierFlags() []cli.Flag {
	timeout := &cli.DurationFlag{Name: "timeout", Value: time.Duration(defaults.Verifier.TimeoutMS) * time.Millisecond, Usage: "per verification ([verifier] timeout_ms)"}
	setters[timeout] = func(c *cli.Command, cfg *pipeline.Config) {
		cfg.Verifier.TimeoutMS = int(c.Duration("timeout").Milliseconds())
	}
	strict := &cli.BoolFlag{Name: "strict", Usage: "math verifier: credit final-answer forms only (\\boxed{}, ####, \"the answer is\", Answer:, a bare number), no last-number fallback ([verifier] strict; default: true in run and experiment, false elsewhere)"}
	setters[strict] = func(c *cli.Command, cfg *pipeline.Config) {
		b := c.Bool("strict")
		cfg.Verifier.Strict = &b
	}
	return []cli.Flag{
		strict,
		stringOpt("verifier", nil, "math, exact, choice, format or command ([verifier] name)", func(c *pipeline.Config) *string { return &c.Verifier.Name }),
		stringOpt("pattern", nil, "format verifier: regular expression the completion must match ([verifier] pattern)", func(c *pipeline.Config) *string { return &c.Verifier.Pattern }),
		boolOpt("format-json", "format verifier: the completion must be JSON ([verifier] json)", func(c *pipeline.Config) *bool { return &c.Verifier.JSON }),
		boolOpt("case-fold", "exact verifier: ignore case; --case-fold=false compares case-sensitively ([verifier] case_fold)", func(c *pipeline.Config) *bool { return &c.Verifier.CaseFold }),
		boolOpt("ignore-punct", "exact verifier: ignore punctuation and symbols ([verifier] ignore_punct)", func(c *pipeline.Config) *bool { return &c.Verifier.IgnorePunct }),
		timeout,
	}
}

// rewardFlags are [reward], [advantage] and [confidence].
func rewardFlags() []cli.Flag {
	return []cli.Flag{
		stringOpt("reward", nil, "confclip or binary ([reward] method)", func(c *pipeline.Config) *string { return &c.Reward.Method }),
		stringOpt("weight", nil, "confclip weight: absolute or relative ([reward] weight)", func(c *pipeline.Config) *string { return &c.Reward.Weight }),
		floatOpt("lambda", nil, "penalty on wrong answers ([reward] lambda)", func(c *pipeline.Config) *float64 { return &c.Reward.Lambda }),
		floatOpt("lo", nil, "lower clip of the absolute weight ([reward] lo)", func(c *pipeline.Config) *float64 { return &c.Reward.Lo }),
		floatOpt("hi", nil, "upper clip of the absolute weight ([reward] hi)", func(c *pipeline.Config) *float64 { return &c.Reward.Hi }),
		floatOpt("eps", nil, "half-width of the relative band ([reward] eps)", func(c *pipeline.Config) *float64 { return &c.Reward.Eps }),
		floatOpt("format-weight", nil, "weight of the format score added to the reward ([reward] format_weight)", func(c *pipeline.Config) *float64 { return &c.Reward.FormatWeight }),
		floatOpt("self-certainty-weight", nil, "weight of the completion's self-certainty added to the reward ([reward] self_certainty_weight)", func(c *pipeline.Config) *float64 { return &c.Reward.SelfCertaintyWeight }),
		stringOpt("format-pattern", nil, "regular expression of the format score ([reward] format_pattern)", func(c *pipeline.Config) *string { return &c.Reward.FormatPattern }),
		stringOpt("advantage", nil, "grpo, dr_grpo, rloo or none ([advantage] estimator)", func(c *pipeline.Config) *string { return &c.Advantage.Estimator }),
		stringOpt("confidence", nil, "geo_mean, arith_mean, min or neg_entropy ([confidence] estimator)", func(c *pipeline.Config) *string { return &c.Confidence.Estimator }),
		stringOpt("scope", nil, "completion or answer ([confidence] scope)", func(c *pipeline.Config) *string { return &c.Confidence.Scope }),
		intOpt("vocab", nil, "vocabulary size for neg_entropy ([confidence] vocab)", func(c *pipeline.Config) *int { return &c.Confidence.Vocab }),
	}
}

// trainFlags are [train].
func trainFlags() []cli.Flag {
	return []cli.Flag{
		intOpt("lora-rank", nil, "rank of a new adapter ([train] lora_rank)", func(c *pipeline.Config) *int { return &c.Train.LoraRank }),
		floatOpt("lora-alpha", nil, "alpha of a new adapter ([train] lora_alpha)", func(c *pipeline.Config) *float64 { return &c.Train.LoraAlpha }),
		floatOpt("lr", nil, "AdamW learning rate ([train] lr)", func(c *pipeline.Config) *float64 { return &c.Train.LR }),
		floatOpt("weight-decay", nil, "AdamW decoupled weight decay ([train] weight_decay)", func(c *pipeline.Config) *float64 { return &c.Train.WeightDecay }),
		floatOpt("grad-clip", nil, "clip the gradient's global norm, 0 = off ([train] grad_clip)", func(c *pipeline.Config) *float64 { return &c.Train.GradClip }),
		stringOpt("loss-agg", nil, "token_mean, seq_mean_token_mean or seq_mean_token_sum_norm ([train] loss_agg)", func(c *pipeline.Config) *string { return &c.Train.LossAgg }),
		floatOpt("train-temperature", nil, "temperature T of the distribution the loss takes its log-probs from, softmax(logits / T): 1 = the model's own, the rollout's temperature as TRL and verl ([train] temperature)", func(c *pipeline.Config) *float64 { return &c.Train.Temperature }),
		floatOpt("entropy-coef", nil, "weight of the completion tokens' entropy subtracted from the loss: > 0 a bonus, < 0 a penalty, 0 = off ([train] entropy_coef)", func(c *pipeline.Config) *float64 { return &c.Train.EntropyCoef }),
		intOpt("micro-batch", nil, "tokens packed into one forward-backward pass, 0 = sized from --memory ([train] micro_batch)", func(c *pipeline.Config) *int { return &c.Train.MicroBatch }),
		boolOpt("quantized-backward", "the backward product through quantized weights in Q8_0 integer dot products, not F32 (gradients within Q8_0's rounding; faster only where the CPU's integer dot products outrun its F32 FMAs: make bench-shapes) ([train] quantized_backward)", func(c *pipeline.Config) *bool { return &c.Train.QuantizedBackward }),
		stringOpt("memory", nil, "memory `SIZE` a pass's activations may take (2GiB, 512MiB), which sizes the default micro-batch; empty = a quarter of the free RAM, or of the GPU's free memory ([train] memory)", func(c *pipeline.Config) *string { return &c.Train.Memory }),
	}
}

// join concatenates flag lists.
func join(lists ...[]cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// loadConfig reads --config (or the defaults) and applies every config flag
// of the command that was given on the command line.
func loadConfig(c *cli.Command) (pipeline.Config, error) {
	f, err := loadFile(c, c.String("config"))
	return f.Config, err
}

// openModel is the preamble of the commands that need the model: the
// configuration (loadConfig) and the model it names, open; the caller
// closes it.
func openModel(c *cli.Command) (pipeline.Config, *pipeline.Model, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return cfg, nil, err
	}
	m, err := pipeline.OpenModel(cfg.Model)
	return cfg, m, err
}

// loadFile reads a configuration file (every command reads the same
// format: a run's tables and [experiment], experiments.File) and applies
// the command's config flags that were given.
func loadFile(c *cli.Command, path string) (experiments.File, error) {
	f, err := experiments.LoadFile(path)
	if err != nil {
		return f, err
	}
	for _, fl := range c.Flags {
		if set, ok := setters[fl]; ok && c.IsSet(fl.Names()[0]) {
			set(c, &f.Config)
		}
	}
	return f, nil
}

// unescape turns \n, \t and \\ into newline, tab and backslash; nothing
// else is special (a stop string with a comma is one stop string).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
