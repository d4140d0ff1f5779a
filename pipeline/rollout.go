package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/confclip/confclip/dataset"
	"github.com/confclip/confclip/internal/atomicfile"
	"github.com/confclip/confclip/rollout"
	"github.com/confclip/confclip/shard"
	"github.com/confclip/confclip/verifiers"
)

// RolloutOptions say what Rollout samples and where it writes.
type RolloutOptions struct {
	Config Config // the [rollout] table and [model] ctx, threads, chat_template
	In     string // prompt records (JSONL)
	Out    string // rollout records (JSONL); an existing file is resumed
	// SkipBad skips malformed lines of In, counting them, instead of stopping.
	// AllowNoAnswer samples prompts without a reference answer although
	// their verifier needs one (scoring will refuse them); by default such
	// a prompt stops the rollout before any compute, naming its line.
	AllowNoAnswer bool
	SkipBad       bool
	// NoTiming leaves timing out of the records: the file then depends only
	// on the model, the prompts and the options.
	NoTiming bool
	// Restart deletes Out and starts over instead of resuming it.
	Restart bool
	// Progress, when set, receives a RolloutProgress after each group.
	Progress func(Event)
	// Shard, when set, takes only the prompts of one shard (package shard).
	Shard shard.Shard
	// Source, when set, generates the groups instead of the model (which
	// may then be nil): an OpenAI-compatible server (server.Client).
	Source RolloutSource
}

// RolloutSource generates rollout groups somewhere else than in this
// process's engine.
type RolloutSource interface {
	// Generate samples cfg.Rollout.Group completions for each prompt and
	// calls emit with each complete group, as rollout.Engine.Generate does.
	Generate(ctx context.Context, cfg Config, prompts []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error)
	// Model names what generates (an endpoint and a model), in place of the
	// model file and its hash in the provenance.
	Model() string
}

// PromptError is a prompt that was not generated, with its place in the
// user's file.
type PromptError struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (e PromptError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: id %q: %s", e.File, e.Line, e.ID, e.Reason)
}

// RolloutResult is what Rollout did, and what the output file holds.
type RolloutResult struct {
	Out          string        `json:"out"`
	Groups       int           `json:"groups"`  // groups written by this call
	Records      int           `json:"records"` // completions written by this call
	Tokens       int           `json:"tokens"`  // completion tokens sampled by this call
	PromptTokens int           `json:"prompt_tokens"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Prompts      int           `json:"prompts"`       // usable prompts in In
	AlreadyDone  int           `json:"already_done"`  // of those, complete in Out before this call
	FileGroups   int           `json:"file_groups"`   // complete groups in Out now
	Skipped      []string      `json:"skipped_lines"` // malformed lines of In (SkipBad)
	Failed       []PromptError `json:"failed"`        // prompts not generated, and why
	// PromptShape says how In was read ("read as gsm8k jsonl: prompt=question, ...").
	PromptShape string `json:"prompt_shape"`
	// Provenance is what made every record of Out (and is kept beside it).
	Provenance dataset.RolloutProvenance `json:"provenance"`
}

// TokensPerSecond is this call's completion token rate.
func (r RolloutResult) TokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Elapsed.Seconds()
}

func rolloutSettings(cfg Config, noTiming bool) dataset.RolloutSettings {
	r := cfg.Rollout
	stop := r.Stop
	if stop == nil {
		stop = []string{}
	}
	return dataset.RolloutSettings{Group: r.Group, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK,
		MinP: r.MinP, Seed: r.Seed, Stop: stop, Chat: r.Chat, ChatTemplate: cfg.Model.ChatTemplate, Ctx: cfg.Model.Ctx, Timing: !noTiming}
}

// Rollout samples Group completions for each prompt of In with the model and
// appends each complete group to Out. An existing Out is resumed: its
// complete groups are kept, a group cut by a crash is dropped, and only the
// prompts not yet done are generated, provided the model, adapter and
// options are those that made the file (else the error names every
// difference; RolloutOptions.Restart starts over). Prompts without an id,
// with an id used before, or that the engine cannot take are listed in
// RolloutResult.Failed with their line and skipped. When ctx is cancelled
// the groups written so far are complete and the error is ctx's.
func Rollout(ctx context.Context, m *Model, o RolloutOptions) (RolloutResult, error) {
	res := RolloutResult{Out: o.Out}
	cfg := o.Config
	if err := o.check(); err != nil {
		return res, err
	}
	pf, err := dataset.ReadPromptFile(o.In, cfg.Data.Map, o.SkipBad)
	if err != nil {
		return res, err
	}
	res.PromptShape = pf.Shape
	for _, s := range pf.Skipped {
		res.Skipped = append(res.Skipped, s.Error())
	}
	kept, keptLines := o.keepPrompts(pf, &res)
	res.Prompts = len(kept)
	if !o.AllowNoAnswer {
		if err := checkAnswers(o.In, kept, keptLines, cfg.Verifier.Name); err != nil {
			return res, err
		}
	}
	if res.Provenance, err = o.provenance(m); err != nil {
		return res, err
	}
	todo, todoLines, err := o.resume(res.Provenance, kept, keptLines, &res)
	if err != nil {
		return res, err
	}
	generate, release, err := o.generator(m)
	if err != nil {
		return res, err
	}
	defer release()
	st, genErr := o.appendGroups(ctx, generate, todo, &res)
	res.Records, res.PromptTokens, res.Elapsed = st.Records, st.PromptTokens, st.Elapsed
	for _, re := range st.Errors {
		pe := PromptError{File: o.In, ID: re.ID, Reason: re.Reason}
		if re.Index >= 0 && re.Index < len(todoLines) {
			pe.Line = todoLines[re.Index]
		}
		res.Failed = append(res.Failed, pe)
	}
	sort.SliceStable(res.Failed, func(i, j int) bool { return res.Failed[i].Line < res.Failed[j].Line })
	return res, genErr
}

// check refuses options Rollout cannot start with, before reading anything.
func (o RolloutOptions) check() error {
	if o.In == "" || o.Out == "" {
		return errors.New("rollout: give the prompt file and the output file")
	}
	if err := o.Shard.Check(); err != nil {
		return err
	}
	if err := atomicfile.NotInput(o.Out, o.In, o.Config.Model.Path, o.Config.Model.Adapter); err != nil {
		return err
	}
	return o.Config.ValidateTables("rollout")
}

// keepPrompts keeps the shard's prompts with an id, each id once (ids key
// the resume and the groups); the others go to res.Failed.
func (o RolloutOptions) keepPrompts(pf dataset.PromptFile, res *RolloutResult) (kept []dataset.Prompt, keptLines []int) {
	seen := map[string]bool{}
	for i, p := range pf.Prompts {
		switch {
		case p.ID == "":
			if o.Shard.K == 0 { // said once, by the first shard
				res.Failed = append(res.Failed, PromptError{File: o.In, Line: pf.Lines[i], Reason: "no id"})
			}
		case !o.Shard.Has(p.ID):
		case seen[p.ID]:
			res.Failed = append(res.Failed, PromptError{File: o.In, Line: pf.Lines[i], ID: p.ID, Reason: "id used before"})
		default:
			seen[p.ID] = true
			kept = append(kept, p)
			keptLines = append(keptLines, pf.Lines[i])
		}
	}
	return kept, keptLines
}

// provenance is what the rollouts are made with: the model (or the
// remote source's) and the settings, and the shard.
func (o RolloutOptions) provenance(m *Model) (dataset.RolloutProvenance, error) {
	var prov dataset.RolloutProvenance
	if o.Source != nil {
		prov = dataset.RolloutProvenance{Schema: dataset.SchemaRolloutProvenance, Model: o.Source.Model(), ModelSHA256: "remote " + o.Source.Model(),
			Settings: rolloutSettings(o.Config, o.NoTiming)}
	} else {
		var err error
		if prov, err = m.rolloutProvenance(o.Config, o.NoTiming); err != nil {
			return prov, err
		}
	}
	prov.Shard = o.Shard.String()
	return prov, nil
}

// resume starts the output over (Restart) or takes up the groups it holds,
// made with the same provenance, and returns the prompts still to do.
func (o RolloutOptions) resume(prov dataset.RolloutProvenance, kept []dataset.Prompt, keptLines []int, res *RolloutResult) (todo []dataset.Prompt, todoLines []int, err error) {
	if o.Restart {
		for _, p := range []string{o.Out, dataset.ProvenancePath(o.Out)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, nil, err
			}
		}
	}
	done, err := dataset.ResumeRollouts(o.Out, o.Config.Rollout.Group, prov)
	if err != nil {
		return nil, nil, err
	}
	res.FileGroups = len(done)
	for i, p := range kept {
		if done[p.ID] {
			res.AlreadyDone++
		} else {
			todo = append(todo, p)
			todoLines = append(todoLines, keptLines[i])
		}
	}
	return todo, todoLines, nil
}

// generateFunc samples groups of prompts and emits each when it is done.
type generateFunc func(ctx context.Context, ps []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error)

// generator is the rollout source: the remote one, or an engine of the
// model (release gives it back).
func (o RolloutOptions) generator(m *Model) (generate generateFunc, release func(), err error) {
	if o.Source != nil {
		return func(ctx context.Context, ps []dataset.Prompt, emit func([]dataset.Rollout) error) (rollout.Stats, error) {
			return o.Source.Generate(ctx, o.Config, ps, emit)
		}, func() {}, nil
	}
	opts := EngineOptions(o.Config)
	opts.NoTiming = o.NoTiming
	e, err := m.engine(opts)
	if err != nil {
		return nil, nil, err
	}
	return e.Generate, func() { m.release(e) }, nil
}

// appendGroups samples the prompts and appends each group to the output as
// it is done, counting into res and reporting progress.
func (o RolloutOptions) appendGroups(ctx context.Context, generate generateFunc, todo []dataset.Prompt, res *RolloutResult) (rollout.Stats, error) {
	app, err := dataset.OpenAppend(o.Out)
	if err != nil {
		return rollout.Stats{}, err
	}
	defer app.Close()
	start := time.Now()
	batch := make([]any, o.Config.Rollout.Group)
	st, genErr := generate(ctx, todo, func(g []dataset.Rollout) error {
		for i := range g {
			batch[i] = &g[i]
		}
		if err := app.WriteLines(batch[:len(g)]); err != nil {
			return fmt.Errorf("%s: %w", o.Out, err)
		}
		res.Groups++
		res.FileGroups++
		for _, r := range g {
			res.Tokens += len(r.Tokens)
		}
		emit(o.Progress, RolloutProgress{Groups: res.Groups, Total: len(todo), Tokens: res.Tokens, Elapsed: time.Since(start)})
		return nil
	})
	if err := app.Close(); err != nil && genErr == nil {
		genErr = err
	}
	return st, genErr
}

// rolloutProvenance is what a rollout with these options would record.
func (m *Model) rolloutProvenance(cfg Config, noTiming bool) (dataset.RolloutProvenance, error) {
	p := dataset.RolloutProvenance{Schema: dataset.SchemaRolloutProvenance, Model: m.Path(), Adapter: m.AdapterPath(), Settings: rolloutSettings(cfg, noTiming)}
	if p.Settings.ChatTemplate == "" {
		p.Settings.ChatTemplate = m.cfg.ChatTemplate
	}
	var err error
	if p.ModelSHA256, err = m.SHA256(); err != nil {
		return p, err
	}
	p.AdapterSHA256, err = m.AdapterSHA256()
	return p, err
}

// checkAnswers refuses prompts without a reference answer whose verifier
// needs one, naming their lines, before compute is spent on them.
func checkAnswers(path string, prompts []dataset.Prompt, lines []int, verifier string) error {
	var bad []string
	for i, p := range prompts {
		v := cmp.Or(p.Verifier, verifier)
		if p.Answer == "" && verifiers.NeedsReference(v) {
			bad = append(bad, fmt.Sprintf("%s:%d: prompt %q has no reference answer, which the %s verifier needs", path, lines[i], p.ID, v))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 5 {
		more = fmt.Sprintf("\n(and %d more)", len(bad)-5)
		bad = bad[:5]
	}
	return fmt.Errorf("%s%s\ngive each an answer, choose a verifier that needs none (format), or sample anyway with --allow-no-answer", strings.Join(bad, "\n"), more)
}
