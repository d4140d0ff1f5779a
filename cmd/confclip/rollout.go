package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/llama"
	"github.com/confclip/confclip/pipeline"
	"github.com/confclip/confclip/rollout"
)

func init() {
	register(&cli.Command{
		Name:      "rollout",
		Usage:     "sample G completions per prompt with their log-probs (resumable)",
		UsageText: "confclip rollout --model M --data prompts.jsonl --out rollouts.jsonl [--group 8] [--max-tokens 256] [--temperature 1] [--stop S]...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "GGUF model `FILE` ([model] path)"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "prompt records `FILE` (JSONL)"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "rollout records `FILE` (JSONL); an existing one is resumed"},
			&cli.StringFlag{Name: "adapter", Usage: "LoRA adapter `FILE` (GGUF) to sample with ([model] adapter)"},
			&cli.IntFlag{Name: "group", Aliases: []string{"G"}, Usage: "completions per prompt ([rollout] group, default 8)"},
			&cli.IntFlag{Name: "max-tokens", Usage: "completion length limit ([rollout] max_tokens, default 256)"},
			&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature, 0 = greedy ([rollout] temperature, default 1)"},
			&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling, 1 = off ([rollout] top_p)"},
			&cli.IntFlag{Name: "top-k", Usage: "keep the K most likely tokens, 0 = off ([rollout] top_k)"},
			&cli.Float64Flag{Name: "min-p", Usage: "keep tokens with p >= min-p * p_max, 0 = off ([rollout] min_p)"},
			&cli.Uint64Flag{Name: "seed", Usage: "base seed ([rollout] seed)"},
			&cli.IntFlag{Name: "parallel", Aliases: []string{"np"}, Usage: "sequences in flight ([rollout] parallel, default max(group, 16))"},
			&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "CPU threads ([model] threads, default: the cores)"},
			&cli.IntFlag{Name: "ctx", Usage: "context of one sequence, prompt + completion, in tokens ([model] ctx)"},
			&cli.BoolFlag{Name: "chat", Usage: "render plain prompts with the model's chat template ([rollout] chat)"},
			&cli.StringSliceFlag{Name: "stop", Usage: "stop `STRING` (repeatable; [rollout] stop)"},
			&cli.BoolFlag{Name: "skip-bad", Usage: "skip malformed lines of --data, counting them, instead of stopping"},
			&cli.BoolFlag{Name: "no-timing", Usage: "leave timing out of the records (the file then depends only on the inputs and options)"},
		},
		Action: rolloutAction,
	})
}

// rolloutConfig applies the command's flags over the config file.
func rolloutConfig(c *cli.Context) (pipeline.Config, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return cfg, err
	}
	flagString(c, "model", &cfg.Model.Path)
	flagString(c, "adapter", &cfg.Model.Adapter)
	flagInt(c, "threads", &cfg.Model.Threads)
	flagInt(c, "ctx", &cfg.Model.Ctx)
	r := &cfg.Rollout
	flagInt(c, "group", &r.Group)
	flagInt(c, "max-tokens", &r.MaxTokens)
	flagFloat(c, "temperature", &r.Temperature)
	flagFloat(c, "top-p", &r.TopP)
	flagInt(c, "top-k", &r.TopK)
	flagFloat(c, "min-p", &r.MinP)
	if c.IsSet("seed") {
		r.Seed = c.Uint64("seed")
	}
	flagInt(c, "parallel", &r.Parallel)
	if c.IsSet("chat") {
		r.Chat = c.Bool("chat")
	}
	if c.IsSet("stop") {
		r.Stop = c.StringSlice("stop")
	}
	if cfg.Model.Path == "" {
		return cfg, pipeline.ErrNoModel
	}
	if r.Group < 1 || r.MaxTokens < 1 {
		return cfg, fmt.Errorf("group %d, max tokens %d: want both >= 1", r.Group, r.MaxTokens)
	}
	return cfg, nil
}

// openEngine loads the model (and adapter) and makes an engine; close frees
// them all.
func openEngine(cfg pipeline.Config, o rollout.Options) (e *rollout.Engine, close func(), err error) {
	m, err := llama.LoadModel(cfg.Model.Path, llama.ModelParams{GPULayers: cfg.Model.GPULayers})
	if err != nil {
		return nil, nil, err
	}
	e, err = rollout.NewEngine(m, o)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	var a *llama.Adapter
	close = func() {
		e.Close()
		if a != nil {
			a.Close()
		}
		m.Close()
	}
	if cfg.Model.Adapter != "" {
		if a, err = llama.LoadAdapter(m, cfg.Model.Adapter); err == nil {
			err = e.SetAdapter(a, 1)
		}
		if err != nil {
			close()
			return nil, nil, err
		}
	}
	return e, close, nil
}

func rolloutAction(c *cli.Context) error {
	cfg, err := rolloutConfig(c)
	if err != nil {
		return err
	}
	in, out, G := c.String("data"), c.String("out"), cfg.Rollout.Group
	stderr := os.Stderr

	prompts, lines, skipped, err := dataset.ReadFile[dataset.Prompt](in, c.Bool("skip-bad"))
	if err != nil {
		return err
	}
	// Prompt ids key the resume and the groups: each must be there, once.
	var bad []rollout.RecordError
	seen := map[string]bool{}
	kept := prompts[:0]
	for i, p := range prompts {
		switch {
		case p.ID == "":
			bad = append(bad, rollout.RecordError{Index: lines[i] - 1, Reason: fmt.Sprintf("%s:%d: no id", in, lines[i])})
		case seen[p.ID]:
			bad = append(bad, rollout.RecordError{Index: lines[i] - 1, ID: p.ID, Reason: fmt.Sprintf("%s:%d: id used before", in, lines[i])})
		default:
			seen[p.ID] = true
			kept = append(kept, p)
		}
	}
	prompts = kept

	done, err := resumeRollouts(out, G)
	if err != nil {
		return err
	}
	todo := prompts[:0:0]
	for _, p := range prompts {
		if !done[p.ID] {
			todo = append(todo, p)
		}
	}
	if len(done) > 0 {
		fmt.Fprintf(stderr, "resuming %s: %d of %d prompts already complete\n", out, len(prompts)-len(todo), len(prompts))
	}

	opts := pipeline.EngineOptions(cfg)
	opts.NoTiming = c.Bool("no-timing")
	e, closeEngine, err := openEngine(cfg, opts)
	if err != nil {
		return err
	}
	defer closeEngine()
	app, err := dataset.OpenAppend(out)
	if err != nil {
		return err
	}
	defer app.Close()

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	prog := newProgress(stderr, len(todo))
	batch := make([]any, G)
	st, genErr := e.Generate(ctx, todo, func(g []dataset.Rollout) error {
		for i := range g {
			batch[i] = &g[i]
		}
		if err := app.WriteLines(batch); err != nil {
			return fmt.Errorf("%s: %w", out, err)
		}
		n := 0
		for _, r := range g {
			n += len(r.Tokens)
		}
		prog.group(n)
		return nil
	})
	prog.end()
	if err := app.Close(); err != nil && genErr == nil {
		genErr = err
	}

	w := c.App.Writer
	fmt.Fprintf(w, "%d groups (%d completions, %d tokens) written to %s in %s: %.1f tokens/s; %d prompt tokens decoded\n",
		st.Groups, st.Records, st.Tokens, out, st.Elapsed.Round(time.Millisecond), st.TokensPerSecond(), st.PromptTokens)
	if n := len(prompts) - len(todo); n > 0 {
		fmt.Fprintf(w, "%d prompts were already complete in %s\n", n, out)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "%d malformed lines skipped (first: %v)\n", len(skipped), skipped[0])
	}
	for _, re := range st.Errors {
		// Engine indices are into todo; say the file's line.
		re.Index = lineOf(prompts, lines, todo, re.Index)
		bad = append(bad, re)
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "%d bad prompts skipped:\n", len(bad))
		for _, re := range bad {
			fmt.Fprintf(w, "  %s line %d, id %q: %s\n", in, re.Index+1, re.ID, re.Reason)
		}
	}
	if errors.Is(genErr, context.Canceled) && c.Context.Err() == nil {
		return cli.Exit(fmt.Sprintf("interrupted: %d complete groups are in %s; run the same command again to resume", st.Groups, out), 130)
	}
	return genErr
}

// lineOf maps an index into todo back to its line in the data file (0-based).
func lineOf(prompts []dataset.Prompt, lines []int, todo []dataset.Prompt, i int) int {
	if i < 0 || i >= len(todo) {
		return i
	}
	for k := range prompts {
		if prompts[k].ID == todo[i].ID {
			return lines[k] - 1
		}
	}
	return i
}

// resumeRollouts returns the prompt ids whose G samples are all in out. A cut
// last line is removed; records of groups that are not complete (a crash in
// the middle of a group's write) are dropped, rewriting the file atomically.
func resumeRollouts(out string, G int) (map[string]bool, error) {
	if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err := dataset.TruncatePartial(out); err != nil {
		return nil, err
	}
	recs, _, _, err := dataset.ReadFile[dataset.Rollout](out, false)
	if err != nil {
		return nil, fmt.Errorf("resuming: %w", err)
	}
	have := map[string]map[int]bool{}
	for _, r := range recs {
		if have[r.PromptID] == nil {
			have[r.PromptID] = map[int]bool{}
		}
		have[r.PromptID][r.Sample] = true
	}
	done := map[string]bool{}
	for id, samples := range have {
		complete := len(samples) == G
		for s := range G {
			complete = complete && samples[s]
		}
		done[id] = complete
	}
	keep := recs[:0]
	for _, r := range recs {
		if done[r.PromptID] {
			keep = append(keep, r)
		}
	}
	if len(keep) < len(recs) {
		w, err := dataset.Create(out)
		if err != nil {
			return nil, err
		}
		for i := range keep {
			if err := w.Write(&keep[i]); err != nil {
				w.Abort()
				return nil, err
			}
		}
		if err := w.Commit(); err != nil {
			return nil, err
		}
	}
	for id, ok := range done {
		if !ok {
			delete(done, id)
		}
	}
	return done, nil
}

// progress shows groups done, tokens/s and the ETA on stderr: rewritten in
// place on a terminal, a plain line every few seconds otherwise.
type progress struct {
	w      io.Writer
	tty    bool
	total  int
	groups int
	tokens int
	start  time.Time
	last   time.Time
}

func newProgress(w io.Writer, total int) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	now := time.Now()
	return &progress{w: w, tty: tty, total: total, start: now, last: now}
}

func (p *progress) group(tokens int) {
	p.groups++
	p.tokens += tokens
	now := time.Now()
	if !p.tty && now.Sub(p.last) < 5*time.Second {
		return
	}
	p.last = now
	p.show(now)
}

func (p *progress) show(now time.Time) {
	el := now.Sub(p.start)
	eta := time.Duration(float64(el) / float64(p.groups) * float64(p.total-p.groups))
	line := fmt.Sprintf("rollout: %d/%d groups, %.1f tokens/s, ETA %s", p.groups, p.total, float64(p.tokens)/el.Seconds(), eta.Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *progress) end() {
	if p.groups == 0 {
		return
	}
	if p.tty {
		fmt.Fprintln(p.w)
	} else if p.last.Before(time.Now().Add(-time.Second)) {
		p.show(time.Now())
	}
}
